/* mkdir_p.c — mkdir -p (mkdir_p.h). */
#include "common/mkdir_p.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int dp_mkdir_p(const char *path, mode_t mode, struct dp_error *err)
{
	char buf[PATH_MAX];
	struct stat st;
	char *p;

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
		errprintf(err, "directory name is too long: '%.80s...'", path);
		errno = ENAMETOOLONG;
		return -1;
	}
	if (!buf[0]) {
		errprintf(err, "cannot create directory '': %s", strerror(ENOENT));
		errno = ENOENT;
		return -1;
	}
	/* Every prefix in turn, then the whole; EEXIST is fine: another rank may have made it a
	 * moment ago, and whether it is a directory is seen below. */
	for (p = buf + 1;; p++) {
		char c = *p;
		if (c != '/' && c != '\0')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) != 0 && errno != EEXIST)
			return errprintf(err, "cannot create directory '%s': %s", buf,
					 strerror(errno));
		*p = c;
		if (c == '\0')
			break;
	}
	if (stat(path, &st) != 0)
		return errprintf(err, "cannot create directory '%s': %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode)) {
		errprintf(err, "'%s' exists and is not a directory", path);
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}
