/* readfile.c — whole files, bounded (readfile.h). */
#include "common/readfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/openfile.h"

#define READ_FIRST (64 * 1024) /* the first buffer where the size is not known */

/* Read to the end; size: what fstat said (0: unknown), so a file is one allocation. */
static int read_all(int fd, const char *name, size_t max, size_t size, char **bufp, size_t *lenp,
		    struct dp_error *err)
{
	/* max + 1 bytes tell that there are more than max; one more for the '\0' */
	size_t limit = max < SIZE_MAX / 2 ? max + 2 : SIZE_MAX / 2;
	size_t len = 0, cap = size ? size + 2 : READ_FIRST;
	char *buf;

	if (cap > limit)
		cap = limit;
	if (!(buf = malloc(cap))) {
		errprintf(err, "%s: out of memory reading it", name);
		errno = ENOMEM;
		return -1;
	}
	for (;;) {
		if (len + 1 == cap) {
			size_t ncap = cap > limit / 2 ? limit : 2 * cap;
			char *grown = realloc(buf, ncap);
			if (!grown) {
				errprintf(err, "%s: out of memory reading it", name);
				errno = ENOMEM;
				goto fail;
			}
			buf = grown;
			cap = ncap;
		}
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			errprintf(err, "%s: cannot read: %s", name, strerror(errno));
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max) {
			errprintf(err, "%s: larger than %zu bytes", name, max);
			errno = EFBIG;
			goto fail;
		}
	}
	buf[len] = '\0';
	*bufp = buf;
	*lenp = len;
	return 0;
fail:
	free(buf);
	return -1;
}

int dp_read_fd(int fd, const char *name, size_t max, char **buf, size_t *len, struct dp_error *err)
{
	*buf = NULL;
	*len = 0;
	return read_all(fd, name, max, 0, buf, len, err);
}

int dp_read_file(const char *path, size_t max, int oflags, char **buf, size_t *len,
		 struct dp_error *err)
{
	struct stat st;
	int fd, fl, rv = -1, e;

	*buf = NULL;
	*len = 0;
	/* O_NONBLOCK: a FIFO without a writer cannot hang the open; reads block again below */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | oflags);
	if (fd < 0)
		return errprintf(err, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0) {
		errprintf(err, "%s: cannot read: %s", path, strerror(errno));
	} else if (S_ISDIR(st.st_mode)) {
		errno = EISDIR;
		errprintf(err, "%s: cannot read: %s", path, strerror(EISDIR));
	} else if (!S_ISREG(st.st_mode)) {
		/* a FIFO or a device could keep the caller waiting for data that never comes */
		errno = EINVAL;
		errprintf(err, "%s: not a regular file (%s)", path, dp_file_kind(st.st_mode));
	} else if ((uintmax_t)st.st_size > max) {
		errno = EFBIG;
		errprintf(err, "%s: larger than %zu bytes", path, max);
	} else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		errprintf(err, "%s: cannot read: %s", path, strerror(errno));
	} else {
		rv = read_all(fd, path, max, (size_t)st.st_size, buf, len, err);
	}
	e = errno;
	close(fd);
	errno = e;
	return rv;
}
