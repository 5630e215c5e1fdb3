/* openfile.c — see openfile.h. Owns the checks, not the decision of which file to open. */
#define _GNU_SOURCE
#include "common/openfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *dp_file_kind(mode_t m)
{
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISDIR(m))
		return "a directory";
	return "not a regular file";
}

int dp_open_regular(const char *path, int flags, mode_t mode, unsigned checks, const char *what,
		    struct dp_error *err)
{
	char name[256];
	struct stat st;
	int fd, fl;

	snprintf(name, sizeof(name), "%s%s", what ? what : "", what ? " " : "");
	fd = open(path, flags | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NONBLOCK, mode);
	if (fd < 0) {
		int e = errno;
		/* a FIFO without a reader refuses a non-blocking writer (ENXIO): say what it is */
		if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
			errprintf(err,
				  "%s%s is %s, not a regular file: refusing to use it (remove it)",
				  name, path, dp_file_kind(st.st_mode));
			errno = EINVAL;
			return -1;
		}
		errprintf(err, "cannot open %s%s: %s%s", name, path, strerror(e),
			  e == ELOOP ? " (a symbolic link is refused: the file would be elsewhere)"
				     : "");
		errno = e;
		return -1;
	}
	if (fstat(fd, &st) != 0) {
		errprintf(err, "cannot stat %s%s: %s", name, path, strerror(errno));
		goto bad;
	}
	if (!S_ISREG(st.st_mode)) {
		errprintf(err, "%s%s is %s, not a regular file: refusing to use it (remove it)",
			  name, path, dp_file_kind(st.st_mode));
		goto bad;
	}
	if ((checks & DP_OPEN_MINE) && st.st_uid != geteuid()) {
		errprintf(err,
			  "%s%s belongs to another user (uid %u): refusing to use it (remove it, "
			  "or choose another path)",
			  name, path, (unsigned)st.st_uid);
		goto bad;
	}
	if ((checks & DP_OPEN_MINE_OR_ROOT) && st.st_uid != geteuid() && st.st_uid != 0) {
		errprintf(err,
			  "%s%s belongs to another user (uid %u), neither you nor root: refusing "
			  "to read it (copy it, or ask its owner)",
			  name, path, (unsigned)st.st_uid);
		goto bad;
	}
	if ((checks & DP_OPEN_NOT_SHARED) && (st.st_mode & (S_IWGRP | S_IWOTH))) {
		errprintf(err,
			  "%s%s is writable by %s (mode %04o): refusing to trust what others can "
			  "change (chmod go-w it)",
			  name, path, st.st_mode & S_IWOTH ? "everyone" : "its group",
			  (unsigned)(st.st_mode & 07777));
		goto bad;
	}
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		errprintf(err, "cannot use %s%s: fcntl: %s", name, path, strerror(errno));
		goto bad;
	}
	return fd;
bad:
	close(fd);
	errno = EINVAL;
	return -1;
}
