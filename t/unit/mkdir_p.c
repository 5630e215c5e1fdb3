/* mkdir_p.c (test) — common/mkdir_p.c: missing parents made with the mode given, an existing
 * directory fine (another rank made it), a file in the way or as a parent refused with the
 * directory named and errno set, "/", a symbolic link to a directory, a name too long. Under a
 * mkdtemp directory in /tmp that is removed at the end. */
#define _GNU_SOURCE
#include "common/mkdir_p.h"
#include "t/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[] = "/tmp/dptrain-mkdir-XXXXXX";

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int main(void)
{
	char path[700], file[512], want[1200], longp[PATH_MAX + 16];
	struct dp_error err = {""};
	struct stat st;
	mode_t old;

	if (!mkdtemp(tmp))
		bail_out("mkdtemp %s: %s", tmp, strerror(errno));

	old = umask(0);
	snprintf(path, sizeof(path), "%s/a/b/c/", tmp);
	ok(dp_mkdir_p(path, 0750, &err) == 0, "mkdir -p a/b/c/: every missing parent made %s",
	   err.text);
	ok(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "... c exists");
	snprintf(file, sizeof(file), "%s/a", tmp);
	ok(stat(file, &st) == 0 && (st.st_mode & 07777) == 0750, "... a parent has the mode: %04o",
	   (unsigned)(st.st_mode & 07777));
	umask(old);
	ok(dp_mkdir_p(path, 0755, &err) == 0, "again: fine (another rank made it)");
	snprintf(path, sizeof(path), "%s/a//b/d", tmp);
	ok(dp_mkdir_p(path, 0755, &err) == 0, "a doubled slash is fine %s", err.text);

	snprintf(file, sizeof(file), "%s/afile", tmp);
	close(open(file, O_WRONLY | O_CREAT, 0644));
	errno = 0;
	ok(dp_mkdir_p(file, 0755, &err) == -1, "a file in the way is refused");
	snprintf(want, sizeof(want), "'%s' exists and is not a directory", file);
	is(err.text, want, "... saying so");
	is_int(errno, ENOTDIR, "... errno ENOTDIR");
	snprintf(path, sizeof(path), "%s/sub/x", file);
	errno = 0;
	ok(dp_mkdir_p(path, 0755, &err) == -1, "a file as a parent is refused");
	snprintf(want, sizeof(want), "cannot create directory '%s/sub': %s", file,
		 strerror(ENOTDIR));
	is(err.text, want, "... naming the directory that could not be made, and why");
	is_int(errno, ENOTDIR, "... errno as mkdir left it");

	ok(dp_mkdir_p("/", 0755, &err) == 0, "/ exists");
	snprintf(path, sizeof(path), "%s/a/b", tmp);
	snprintf(file, sizeof(file), "%s/link", tmp);
	ok(symlink(path, file) == 0 && dp_mkdir_p(file, 0755, &err) == 0,
	   "a symbolic link to a directory counts as the directory %s", err.text);

	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	errno = 0;
	ok(dp_mkdir_p(longp, 0755, &err) == -1, "a name longer than PATH_MAX is refused");
	like(err.text, "directory name is too long: 'aaaa", "... as too long");
	is_int(errno, ENAMETOOLONG, "... errno ENAMETOOLONG");
	ok(dp_mkdir_p("", 0755, &err) == -1 && errno == ENOENT, "an empty name is refused");
	ok(dp_mkdir_p("/", 0755, NULL) == 0 && dp_mkdir_p("", 0755, NULL) == -1,
	   "err may be NULL (the caller words it from errno)");

	nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return done_testing();
}
