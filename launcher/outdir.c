/* outdir.c — the output directory of a step: its name from a pattern (%j, %s), creating it
 * when many ranks race to, and atomic writes of the files in it. Must not decide what goes
 * into the files (env_export.c, ranktable/ do). */
#define _GNU_SOURCE /* O_PATH */
#include "common/atomic_file.h"
#include "common/env.h"
#include "common/envint.h"
#include "common/error.h"
#include "launcher/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int launch_outdir_expand(const char *pattern, const char *job, const char *step, const char *node,
			 char out[LAUNCH_PATH_MAX], struct dp_error *err)
{
	char buf[LAUNCH_PATH_MAX], cwd[LAUNCH_PATH_MAX], user[256] = "";
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
		} else if (p[1] == 'u') {
			if (!user[0] && launch_user_name(user, sizeof(user)) != 0) {
				errprintf(err,
					  "output directory '%s': cannot tell this user's name "
					  "for %%u",
					  pattern);
				return -1;
			}
			add = user;
			p++;
		} else if (p[1] == '%') {
			add = "%";
			p++;
		} else {
			errprintf(
			    err,
			    "output directory '%s': unknown pattern '%%%.1s' (known: %%j job id, "
			    "%%s step id, %%n node name, %%u user name, %%%% a percent sign)",
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

int launch_user_name(char *out, size_t len)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	if (getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &res) == 0 && res && res->pw_name[0] &&
	    !strchr(res->pw_name, '/') && strlen(res->pw_name) < len) {
		snprintf(out, len, "%s", res->pw_name);
		return 0;
	}
	/* no name service answer: the uid, which is as unique */
	return snprintf(out, len, "%u", (unsigned)geteuid()) < (int)len ? 0 : -1;
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

/* Can someone other than this user (and root) rename the entry `child` of directory `dir`?
 * Then a path through it can be made to lead elsewhere after any check. 0 if not; else 1 when
 * dir is at fault, 2 when child is (another user's entry in a sticky directory: its owner can
 * move it), with why. */
static int swappable(const struct stat *dir, const struct stat *child, uid_t me, char *why,
		     size_t len)
{
	if (dir->st_uid != me && dir->st_uid != 0) {
		snprintf(why, len, "belongs to another user (uid %u)", (unsigned)dir->st_uid);
		return 1;
	}
	if (!(dir->st_mode & (S_IWGRP | S_IWOTH)))
		return 0;
	/* sticky (/tmp, a site's /scratch): only the entry's owner, the directory's and root
	 * may rename an entry */
	if (dir->st_mode & S_ISVTX) {
		if (child->st_uid == me || child->st_uid == 0)
			return 0;
		snprintf(why, len, "belongs to another user (uid %u)", (unsigned)child->st_uid);
		return 2;
	}
	snprintf(why, len, "is writable by %s and not sticky (mode %04o)",
		 dir->st_mode & S_IWOTH ? "everyone" : "its group",
		 (unsigned)(dir->st_mode & 07777));
	return 1;
}

int launch_dir_safe(const char *path, char canon[LAUNCH_PATH_MAX], struct dp_error *err)
{
	char real[PATH_MAX], walked[LAUNCH_PATH_MAX];
	struct stat parent, st;
	uid_t me = geteuid();
	int fd, next, rv = -1;
	size_t used = 0;
	char *save = NULL, *comp;

	if (launch_dir_owned(path, err) != 0)
		return -1;
	if (!realpath(path, real)) {
		errprintf(err, "cannot resolve the output directory '%s': %s", path,
			  strerror(errno));
		return -1;
	}
	if (strlen(real) >= LAUNCH_PATH_MAX) {
		errprintf(err, "output directory is too long: '%.80s...'", real);
		return -1;
	}
	/* Walk the resolved path one directory at a time, never through a link (a link found
	 * now was put there since realpath: refused), each step checked on what was opened. */
	fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &parent) != 0) {
		errprintf(err, "cannot open /: %s", strerror(errno));
		goto out;
	}
	walked[0] = '\0';
	char copy[PATH_MAX];
	snprintf(copy, sizeof(copy), "%s", real);
	for (comp = strtok_r(copy, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
		char why[128], dir[LAUNCH_PATH_MAX];
		int fault;

		used += (size_t)snprintf(walked + used, sizeof(walked) - used, "/%s", comp);
		next = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 || fstat(next, &st) != 0) {
			errprintf(
			    err,
			    "the output directory '%s' changed while it was checked (%s: %s): "
			    "is someone replacing it?",
			    path, walked, strerror(errno));
			if (next >= 0)
				close(next);
			goto out;
		}
		fault = swappable(&parent, &st, me, why, sizeof(why));
		if (fault) {
			snprintf(dir, sizeof(dir), "%.*s", (int)(used - strlen(comp) - 1), walked);
			errprintf(
			    err,
			    "the output directory '%s' is not safe: '%s' on its way %s, so "
			    "another user could rename '%s' and put a directory of theirs in "
			    "its place, after any check: this job's logs, checkpoints and "
			    "resume would follow it. Choose an output.dir whose every parent "
			    "directory is yours or root's and writable only by its owner (or "
			    "sticky, as /tmp and a site's /scratch are), e.g. /scratch/%%u/... "
			    "as dptrain(8), SECURITY, explains",
			    path,
			    fault == 2 ? walked
			    : dir[0]   ? dir
				       : "/",
			    why, walked);
			close(next);
			goto out;
		}
		close(fd);
		fd = next;
		parent = st;
	}
	snprintf(canon, LAUNCH_PATH_MAX, "%s", real);
	rv = 0;
out:
	if (fd >= 0)
		close(fd);
	return rv;
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
	f = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NONBLOCK, 0600);
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
	if (dp_env_int(ENV_DPTRAIN_LOCK_FD, 3, INT_MAX, &inherited, err) == 1 &&
	    fstat(inherited, &ist) == 0 && ist.st_dev == st.st_dev && ist.st_ino == st.st_ino &&
	    flock(inherited, LOCK_EX | LOCK_NB) == 0) {
		int held = fcntl(inherited, F_DUPFD_CLOEXEC, 0);
		close(f);
		if (held >= 0) { /* one copy, close-on-exec like any other lock */
			close(inherited);
			unsetenv(ENV_DPTRAIN_LOCK_FD);
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
