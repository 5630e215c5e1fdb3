/* outdir.c — the output directory of a step: its name from a pattern (%j, %s), creating it
 * when many ranks race to, and atomic writes of the files in it. Must not decide what goes
 * into the files (env_export.c, ranktable/ do). */
#include "common/atomic_file.h"
#include "common/error.h"
#include "pmix/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int launch_outdir_expand(const char *pattern, const char *job, const char *step, const char *node,
			 char out[LAUNCH_PATH_MAX], struct dp_error *err)
{
	char buf[LAUNCH_PATH_MAX], cwd[LAUNCH_PATH_MAX];
	size_t used = 0, n;
	const char *p, *add;
	char one[2] = {0, 0};

	if (!pattern || !*pattern) {
		errprintf(err, "the output directory is empty");
		return -1;
	}
	for (p = pattern; *p; p++) {
		if (*p != '%') {
			one[0] = *p;
			add = one;
		} else if (p[1] == 'j') {
			add = job;
			p++;
		} else if (p[1] == 's') {
			add = step;
			p++;
		} else if (p[1] == 'n') {
			add = node;
			p++;
		} else if (p[1] == '%') {
			add = "%";
			p++;
		} else {
			errprintf(
			    err,
			    "output directory '%s': unknown pattern '%%%.1s' (known: %%j job id, "
			    "%%s step id, %%n node name, %%%% a percent sign)",
			    pattern, p[1] ? p + 1 : "");
			return -1;
		}
		n = strlen(add);
		if (used + n >= sizeof(buf)) {
			errprintf(err, "output directory is too long (over %d bytes): '%.80s...'",
				  LAUNCH_PATH_MAX - 1, pattern);
			return -1;
		}
		memcpy(buf + used, add, n);
		used += n;
	}
	buf[used] = '\0';
	if (buf[0] == '/') {
		snprintf(out, LAUNCH_PATH_MAX, "%s", buf);
		return 0;
	}
	if (!getcwd(cwd, sizeof(cwd))) {
		errprintf(err, "cannot tell the working directory for '%s': %s", buf,
			  strerror(errno));
		return -1;
	}
	if (snprintf(out, LAUNCH_PATH_MAX, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", buf) >=
	    LAUNCH_PATH_MAX) {
		errprintf(err, "output directory is too long (over %d bytes): '%.80s...'",
			  LAUNCH_PATH_MAX - 1, buf);
		return -1;
	}
	return 0;
}

int launch_mkdir_p(const char *path, struct dp_error *err)
{
	char buf[LAUNCH_PATH_MAX];
	struct stat st;
	char *p;

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
		errprintf(err, "directory name is too long: '%.80s...'", path);
		return -1;
	}
	/* Every prefix in turn; EEXIST is fine, another rank may have made it a moment ago. */
	for (p = buf + 1; buf[0] != '\0'; p++) {
		char c = *p;
		if (c != '/' && c != '\0')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
			errprintf(err, "cannot create directory '%s': %s", buf, strerror(errno));
			return -1;
		}
		*p = c;
		if (c == '\0')
			break;
	}
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
		errprintf(err, "'%s' exists and is not a directory", path);
		return -1;
	}
	return 0;
}

int launch_write_all(int fd, const char *p, size_t len)
{
	return af_write_fd(fd, p, len);
}

int launch_dir_owned(const char *path, struct dp_error *err)
{
	struct stat st;

	if (lstat(path, &st) != 0) {
		errprintf(err, "cannot use directory '%s': %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		errprintf(err,
			  "'%s' is not a directory (a symbolic link or a file is "
			  "refused: the job's files would go elsewhere)",
			  path);
		return -1;
	}
	if (st.st_uid != geteuid()) {
		errprintf(err,
			  "the output directory '%s' belongs to another user (uid %u); "
			  "refusing to write this job's files there: choose another output.dir, or "
			  "remove it if it is yours",
			  path, (unsigned)st.st_uid);
		return -1;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		errprintf(err,
			  "the output directory '%s' is writable by %s (mode %04o); "
			  "refusing to write this job's files where others can replace them: "
			  "chmod go-w it",
			  path, st.st_mode & S_IWOTH ? "everyone" : "its group",
			  (unsigned)(st.st_mode & 07777));
		return -1;
	}
	return 0;
}

int launch_write_atomic(const char *path, const char *data, size_t len, unsigned mode,
			struct dp_error *err)
{
	struct af_file f;

	/* Opened apart from the rest to keep this message: launch_files.c checks it. */
	if (af_open(&f, path, mode, err) < 0) {
		errprintf(err, "cannot create a temporary file next to '%s': %s", path,
			  strerror(errno));
		return -1;
	}
	if (af_write_chunk(&f, data, len, err) < 0)
		return -1;
	return af_commit(&f, err);
}

int launch_outdir_lock(const char *outdir, const char *who, int *fd, struct dp_error *err)
{
	char path[LAUNCH_PATH_MAX + 16], holder[512];
	struct stat st;
	ssize_t n;
	int f;

	*fd = -1;
	if (snprintf(path, sizeof(path), "%s/.dptrain.lock", outdir) >= (int)sizeof(path)) {
		errprintf(err, "output directory is too long: '%.80s...'", outdir);
		return -1;
	}
	f = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
	if (f < 0) {
		errprintf(err, "cannot open the output directory's lock %s: %s%s", path,
			  strerror(errno),
			  errno == ELOOP ? " (a symbolic link is refused: remove it)" : "");
		return -1;
	}
	if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
		errprintf(err,
			  "the output directory's lock %s is not a regular file of this user's; "
			  "remove it",
			  path);
		close(f);
		return -1;
	}
	/* dptrain-run took this lock for its ranks before starting them: the same lock, passed
	 * down (DPTRAIN_LOCK_FD), is rank 0's */
	struct stat ist;
	int inherited;
	if (rt_env_int("DPTRAIN_LOCK_FD", 3, INT_MAX, &inherited, err) == 1 &&
	    fstat(inherited, &ist) == 0 && ist.st_dev == st.st_dev && ist.st_ino == st.st_ino &&
	    flock(inherited, LOCK_EX | LOCK_NB) == 0) {
		int held = fcntl(inherited, F_DUPFD_CLOEXEC, 0);
		close(f);
		if (held >= 0) { /* one copy, close-on-exec like any other lock */
			close(inherited);
			unsetenv("DPTRAIN_LOCK_FD");
		}
		if (held < 0) {
			errprintf(err, "cannot keep the output directory's lock: %s",
				  strerror(errno));
			return -1;
		}
		*fd = held;
		return 0;
	}
	if (flock(f, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		if (e == EWOULDBLOCK) {
			n = pread(f, holder, sizeof(holder) - 1, 0);
			holder[n > 0 ? n : 0] = '\0';
			holder[strcspn(holder, "\n")] = '\0';
			errprintf(
			    err,
			    "the output directory '%s' is in use by another job (%s): two jobs "
			    "writing one directory mix their logs, metrics and checkpoints; give "
			    "this job its own output.dir (%%j.%%s in it makes one per step), or "
			    "wait until that job has ended",
			    outdir, holder[0] ? holder : "it did not say which");
			close(f);
			return -1;
		}
		close(f);
		if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
			errprintf(err,
				  "the file system of '%s' has no locks (%s): whether another job "
				  "uses the directory is not checked",
				  outdir, strerror(e));
			return 1;
		}
		errprintf(err, "cannot lock %s: %s", path, strerror(e));
		return -1;
	}
	n = (ssize_t)strlen(who);
	if (ftruncate(f, 0) != 0 || pwrite(f, who, (size_t)n, 0) != n ||
	    pwrite(f, "\n", 1, n) != 1) {
		errprintf(err, "cannot write the lock %s: %s", path, strerror(errno));
		close(f);
		return -1;
	}
	*fd = f;
	return 0;
}

void launch_utc_now(char out[LAUNCH_TIME_MAX])
{
	time_t now = time(NULL);
	struct tm tm;

	if (!gmtime_r(&now, &tm) || !strftime(out, LAUNCH_TIME_MAX, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, LAUNCH_TIME_MAX, "?");
}
