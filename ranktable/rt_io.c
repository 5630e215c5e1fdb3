/* rt_io.c — rank-table files: read whole (bounded), write atomically (temporary file in the same
 * directory, fsync, rename, fsync of the directory), so a reader sees the old table or the new
 * one, never a part. Owns file handling only; JSON is rt_json.c's. */
#define _GNU_SOURCE /* mkostemp, asprintf */
#include "rt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rt_read(struct ranktable *rt, const char *path, char err[RT_ERR_MAX])
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int fd, rv = -1;

	memset(rt, 0, sizeof(*rt));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return rt_errf(err, "%s: cannot open: %s", path, strerror(errno));
	for (;;) {
		if (len == cap) {
			cap = cap ? 2 * cap : 64 * 1024;
			if (cap > (size_t)RT_FILE_MAX + 1)
				cap = (size_t)RT_FILE_MAX + 1;
			char *grown = realloc(buf, cap);
			if (!grown) {
				rt_errf(err, "%s: out of memory reading it", path);
				goto out;
			}
			buf = grown;
		}
		ssize_t got = read(fd, buf + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rt_errf(err, "%s: cannot read: %s", path, strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		len += (size_t)got;
		if (len > (size_t)RT_FILE_MAX) {
			rt_errf(err, "%s: larger than %ld bytes: not a rank table", path,
				RT_FILE_MAX);
			goto out;
		}
	}
	rv = rt_parse(rt, buf ? buf : "", len, path, err);
out:
	free(buf);
	close(fd);
	return rv;
}

static int rt_write_all(int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t put = write(fd, p, len);
		if (put < 0 && errno == EINTR)
			continue;
		if (put < 0)
			return -1;
		p += put;
		len -= (size_t)put;
	}
	return 0;
}

int rt_write_atomic(const struct ranktable *rt, const char *path, enum rt_schema schema,
		    char err[RT_ERR_MAX])
{
	char *text = NULL, *tmp = NULL, *dir = NULL, why[RT_ERR_MAX];
	const char *base = strrchr(path, '/');
	int fd = -1, dfd = -1, rv = -1;

	if (!(text = rt_to_json(rt, schema, why))) {
		rt_errf(err, "%s: not written: %s", path, why);
		goto out;
	}
	/* The temporary lives next to the target: rename is atomic only within a file system. */
	if (base) {
		dir = strndup(path, base == path ? 1 : (size_t)(base - path));
		base++;
	} else {
		dir = strdup(".");
		base = path;
	}
	if (!*base) {
		rt_errf(err, "%s: not a file name", path);
		goto out;
	}
	if (!dir || asprintf(&tmp, "%s/.%s.XXXXXX", dir, base) < 0) {
		tmp = NULL;
		rt_errf(err, "%s: out of memory", path);
		goto out;
	}
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
		rt_errf(err, "%s: cannot create a temporary file in %s: %s", path, dir,
			strerror(errno));
		free(tmp);
		tmp = NULL;
		goto out;
	}
	if (fchmod(fd, 0644) < 0 || rt_write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0) {
		rt_errf(err, "%s: cannot write %s: %s", path, tmp, strerror(errno));
		goto out;
	}
	if (close(fd) < 0) {
		fd = -1;
		rt_errf(err, "%s: cannot write %s: %s", path, tmp, strerror(errno));
		goto out;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		rt_errf(err, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
		goto out;
	}
	free(tmp);
	tmp = NULL;
	/* The rename itself is durable only once the directory is; some file systems cannot
	 * fsync a directory (EINVAL), and there is nothing more to do on those. */
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    (fsync(dfd) < 0 && errno != EINVAL)) {
		rt_errf(err, "%s: written, but cannot sync directory %s: %s", path, dir,
			strerror(errno));
		goto out;
	}
	rv = 0;
out:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	if (tmp) {
		unlink(tmp);
		free(tmp);
	}
	free(dir);
	free(text);
	return rv;
}
