/* append.c — see append.h. */
#include "common/append.h"

#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/warn.h"

int dp_append_whole(int fd, const void *buf, size_t n)
{
	off_t at = lseek(fd, 0, SEEK_END);
	ssize_t w;
	do
		w = write(fd, buf, n);
	while (w < 0 && errno == EINTR);
	if (w == (ssize_t)n)
		return 0;
	int e = w < 0 ? errno : ENOSPC;
	/* a part of a record is no record: cut it off again */
	if (w > 0 && at >= 0 && ftruncate(fd, at) != 0)
		e = errno;
	return e;
}

void dp_append_or_warn(int fd, const void *buf, size_t n, const char *path, const char *what,
		       int *warned)
{
	int e = dp_append_whole(fd, buf, n);
	if (e && !*warned)
		dp_warn("dptrain", NULL,
			"%s: cannot write %s (%s): it is left out, and so is every later one that "
			"does not fit; training goes on",
			path, what, strerror(e));
	if (e)
		*warned = 1;
}
