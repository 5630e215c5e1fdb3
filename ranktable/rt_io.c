/* rt_io.c — rank-table files: read whole (bounded), write atomically (atomic_file.c), so a
 * reader sees the old table or the new one, never a part. Owns file handling only; JSON is
 * rt_json.c's. */
#include "common/atomic_file.h"
#include "common/error.h"
#include "ranktable/rt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rt_read(struct ranktable *rt, const char *path, struct dp_error *err)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int fd, rv = -1;

	memset(rt, 0, sizeof(*rt));
	/* O_NONBLOCK: a FIFO put where a table is expected cannot hang the open */
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0)
		return errprintf(err, "%s: cannot open: %s", path, strerror(errno));
	struct stat st;
	int fl = fcntl(fd, F_GETFL);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fl < 0 ||
	    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		errprintf(err, "%s: not a regular file: not a rank table", path);
		close(fd);
		return -1;
	}
	for (;;) {
		if (len == cap) {
			cap = cap ? 2 * cap : 64 * 1024;
			if (cap > (size_t)RT_FILE_MAX + 1)
				cap = (size_t)RT_FILE_MAX + 1;
			char *grown = realloc(buf, cap);
			if (!grown) {
				errprintf(err, "%s: out of memory reading it", path);
				goto out;
			}
			buf = grown;
		}
		ssize_t got = read(fd, buf + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			errprintf(err, "%s: cannot read: %s", path, strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		len += (size_t)got;
		if (len > (size_t)RT_FILE_MAX) {
			errprintf(err, "%s: larger than %ld bytes: not a rank table", path,
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

int rt_write_atomic(const struct ranktable *rt, const char *path, enum rt_schema schema,
		    unsigned mode, struct dp_error *err)
{
	char *text;
	int rv;

	if (!(text = rt_to_json(rt, schema, err)))
		return errprefix(err, "%s: not written", path);
	rv = af_write(path, text, strlen(text), mode, err);
	free(text);
	return rv;
}
