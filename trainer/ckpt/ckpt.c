/* ckpt.c — checkpoint directories (see ckpt.h): a step written under a temporary name and
 * renamed into place, validation against its state.json, the choice of the newest valid step,
 * pruning. Removes only what it recognises as its own (plain files inside step directories and
 * the directories themselves) and never follows a symbolic link; knows nothing of file contents. */
#define _GNU_SOURCE /* renameat2 */
#include "trainer/ckpt/ckpt.h"
#include "common/env.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/mkdir_p.h"
#include "common/readfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#define CK_FORMAT    "dptrain-checkpoint"
#define CK_VERSION   2 /* 1: the caller's state inside state.json, unchecked (still read) */
#define CK_STATE     "state.json"
#define CK_TRAINER   "trainer_state.json" /* the caller's state, listed and checked as a file */
#define CK_STATE_MAX (256L << 20)	  /* a bigger state.json is not one of ours */
#define CK_CHUNK     (1 << 20)

enum ck_kind { CK_STEP, CK_TMP, CK_OLD, CK_LATEST_TMP };

struct ck_ent {
	long step;
	enum ck_kind kind;
	char name[256];
};

/* Advice appended to strerror() where the cause is a full disk or quota. */
static const char *ck_full(int e)
{
	if (e == ENOSPC)
		return " (the disk is full: free space there or set checkpoint.dir to another "
		       "disk)";
	if (e == EDQUOT)
		return " (the disk quota is exhausted: free space or set checkpoint.dir elsewhere)";
	return "";
}

static int ck_join(char *out, const char *dir, const char *name, struct dp_error *err)
{
	int n = snprintf(out, CKPT_PATH_MAX, "%s/%s", dir, name);
	if (n < 0 || n >= CKPT_PATH_MAX)
		return errprintf(err, "%s/%s: path too long", dir, name);
	return 0;
}

/* The N of a name "step-<N>...", N in canonical decimal (no sign, no leading zero); *rest is
 * what follows the digits. -1 if the name does not start that way. */
static int ck_parse_step(const char *name, long *step, const char **rest)
{
	const char *p = name + 5;
	long n = 0;
	if (strncmp(name, "step-", 5) != 0 || *p < '0' || *p > '9' ||
	    (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (n > (LONG_MAX - (*p - '0')) / 10)
			return -1;
		n = n * 10 + (*p - '0');
	}
	*step = n;
	*rest = p;
	return 0;
}

/* A file name a caller may use: plain, not hidden, not ours. */
static int ck_name_ok(const char *name)
{
	return name && *name && name[0] != '.' && !strchr(name, '/') && strlen(name) < 256 &&
	       strcmp(name, CK_STATE) != 0 && strcmp(name, "latest") != 0;
}

/* The rename or creation of a directory entry is durable only once the directory is; some file
 * systems cannot fsync a directory (EINVAL) and there is nothing more to do on those. */
static int ck_fsync_dir(const char *dir, struct dp_error *err)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errprintf(err, "%s: cannot open to sync: %s", dir, strerror(errno));
	if (fsync(fd) < 0 && errno != EINVAL) {
		int e = errno;
		close(fd);
		return errprintf(err, "%s: cannot sync: %s%s", dir, strerror(e), ck_full(e));
	}
	close(fd);
	return 0;
}

/* mkdir -p root (common/mkdir_p.c), with advice when the disk is full. */
static int ck_mkdir_p(const char *root, struct dp_error *err)
{
	if (dp_mkdir_p(root, 0755, err) == 0)
		return 0;
	return errprintf(err, "%s%s", err->text, ck_full(errno));
}

/* dir/name = text, atomically (atomic_file.c), with advice when the disk is full. */
static int ck_write_atomic(const char *dir, const char *name, const char *text,
			   struct dp_error *err)
{
	char path[CKPT_PATH_MAX];

	if (ck_join(path, dir, name, err) < 0)
		return -1;
	if (af_write(path, text, strlen(text), 0644, err) == 0)
		return 0;
	return errprintf(err, "%s%s", err->text, ck_full(errno));
}

/* Size and CRC-32 of dir/name, a regular file (a symbolic link is refused); fsyncs it first
 * when asked. */
static int ck_sum(const char *dir, const char *name, int sync, long long *bytes, uint32_t *crc,
		  struct dp_error *err)
{
	char path[CKPT_PATH_MAX];
	unsigned char *buf = NULL;
	uLong c = crc32(0L, Z_NULL, 0);
	long long total = 0;
	struct stat st;
	int fd, rv = -1;

	if (ck_join(path, dir, name, err) < 0)
		return -1;
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return errprintf(err, "%s: %s", path,
				 errno == ENOENT ? "missing" : strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		errprintf(err, "%s: not a regular file", path);
		goto out;
	}
	if (sync && fsync(fd) < 0) {
		int e = errno;
		errprintf(err, "%s: cannot sync: %s%s", path, strerror(e), ck_full(e));
		goto out;
	}
	if (!(buf = malloc(CK_CHUNK))) {
		errprintf(err, "%s: out of memory", path);
		goto out;
	}
	for (;;) {
		ssize_t got = read(fd, buf, CK_CHUNK);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			errprintf(err, "%s: cannot read: %s", path, strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		c = crc32(c, buf, (uInt)got);
		total += got;
	}
	*bytes = total;
	*crc = (uint32_t)c;
	rv = 0;
out:
	free(buf);
	close(fd);
	return rv;
}

/* Removes dirfd/name, a directory of plain files. Anything else inside (a subdirectory, a
 * symbolic link, a device) is left alone, and so is the directory then; a name that is itself
 * a symbolic link is not followed. */
static int ck_remove_dir(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct dirent *e;
	DIR *d;

	if (fd < 0)
		return -1;
	if (!(d = fdopendir(fd))) {
		close(fd);
		return -1;
	}
	while ((e = readdir(d))) {
		struct stat st;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
			unlinkat(fd, e->d_name, 0);
			/* tests: a crash in the middle of a removal (t/unit/ckpt.c) */
			if (getenv(ENV_DPTRAIN_TEST_CKPT_CRASH_IN_REMOVE))
				_exit(99);
		}
	}
	closedir(d);
	return unlinkat(dirfd, name, AT_REMOVEDIR);
}

/* Removes path, a directory of plain files (ck_remove_dir). */
static void ck_remove_path(const char *path)
{
	char dir[CKPT_PATH_MAX];
	const char *slash = strrchr(path, '/');
	int dfd;
	if (!slash) {
		ck_remove_dir(AT_FDCWD, path);
		return;
	}
	snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return;
	ck_remove_dir(dfd, slash + 1);
	close(dfd);
}

static int ck_ent_cmp(const void *a, const void *b)
{
	const struct ck_ent *x = a, *y = b;
	if (x->step != y->step)
		return x->step > y->step ? -1 : 1;
	return (int)x->kind - (int)y->kind;
}

/* The entries of root that are ours: step-<N>, step-<N>.tmp-*, step-<N>.old-*, latest.tmp-*,
 * newest step first. *missing is set when root does not exist (0 entries, not an error). */
static int ck_scan(const char *root, struct ck_ent **out, size_t *n, int *missing,
		   struct dp_error *err)
{
	struct ck_ent *v = NULL;
	size_t len = 0, cap = 0;
	struct dirent *e;
	DIR *d;

	*out = NULL;
	*n = 0;
	*missing = 0;
	if (!(d = opendir(root))) {
		if (errno == ENOENT) {
			*missing = 1;
			return 0;
		}
		return errprintf(err, "%s: cannot read the checkpoint directory: %s", root,
				 strerror(errno));
	}
	while ((e = readdir(d))) {
		struct ck_ent ent = {.step = -1};
		const char *rest;
		if (strlen(e->d_name) >= sizeof(ent.name))
			continue;
		if (ck_parse_step(e->d_name, &ent.step, &rest) == 0) {
			if (!*rest)
				ent.kind = CK_STEP;
			else if (!strncmp(rest, ".tmp-", 5))
				ent.kind = CK_TMP;
			else if (!strncmp(rest, ".old-", 5))
				ent.kind = CK_OLD;
			else
				continue;
		} else if (!strncmp(e->d_name, "latest.tmp-", 11)) {
			ent.kind = CK_LATEST_TMP;
		} else {
			continue;
		}
		memcpy(ent.name, e->d_name, strlen(e->d_name) + 1);
		if (len == cap) {
			struct ck_ent *g = realloc(v, (cap = cap ? 2 * cap : 32) * sizeof(*v));
			if (!g) {
				free(v);
				closedir(d);
				return errprintf(err, "%s: out of memory listing it", root);
			}
			v = g;
		}
		v[len++] = ent;
	}
	closedir(d);
	if (len)
		qsort(v, len, sizeof(*v), ck_ent_cmp);
	*out = v;
	*n = len;
	return 0;
}

/* The whole small file at path (a symbolic link is refused); label names it in messages. */
static char *ck_read_small(const char *path, size_t *lenp, struct dp_error *err, const char *label)
{
	char *buf;

	if (dp_read_file(path, CK_STATE_MAX, O_NOFOLLOW, &buf, lenp, err) == 0)
		return buf;
	if (errno == ENOENT)
		errprintf(err, "%s: missing", label);
	else if (errno == EISDIR || errno == EINVAL || errno == EFBIG)
		errprintf(err, "%s: not a regular file of at most %ld bytes", label, CK_STATE_MAX);
	else if (errno == ENOMEM)
		errprintf(err, "%s: out of memory", label);
	else
		errprintf(err, "%s: %s", label, strerror(errno));
	return NULL;
}

/* One entry of state.json's "files" (fname: {bytes, crc32}) against the file in dir: a plain
 * name, a regular file of that size and, with check_crc, that CRC. label names state.json. */
static int ck_check_file(const char *dir, const char *fname, json_t *jf, int check_crc,
			 const char *label, struct dp_error *err)
{
	json_t *jb = json_object_get(jf, "bytes"), *jc = json_object_get(jf, "crc32");
	char path[CKPT_PATH_MAX];
	long long want, got;
	uint32_t crc;
	struct stat st;

	if (!ck_name_ok(fname))
		return errprintf(err, "%s: \"files\" lists \"%s\", not a plain file name", label,
				 fname);
	if (!json_is_integer(jb) || json_integer_value(jb) < 0 || !json_is_integer(jc) ||
	    json_integer_value(jc) < 0 || json_integer_value(jc) > 0xffffffffLL)
		return errprintf(err, "%s: \"files\".\"%s\" needs integers bytes and crc32", label,
				 fname);
	want = json_integer_value(jb);
	if (ck_join(path, dir, fname, err) < 0)
		return -1;
	if (lstat(path, &st) < 0)
		return errprintf(err, "%s: %s: %s", dir, fname,
				 errno == ENOENT ? "missing" : strerror(errno));
	if (!S_ISREG(st.st_mode))
		return errprintf(err, "%s: %s: not a regular file", dir, fname);
	if ((long long)st.st_size != want)
		return errprintf(err, "%s: %s: %lld bytes, " CK_STATE " says %lld (%s)", dir, fname,
				 (long long)st.st_size, want,
				 (long long)st.st_size < want ? "truncated?"
							      : "not the file it describes");
	if (!check_crc)
		return 0;
	if (ck_sum(dir, fname, 0, &got, &crc, err) < 0)
		return -1;
	if (got != want)
		return errprintf(err, "%s: %s: %lld bytes, " CK_STATE " says %lld (changing?)", dir,
				 fname, got, want);
	if ((long long)crc != json_integer_value(jc))
		return errprintf(err,
				 "%s: %s: crc32 mismatch (corrupt): the file has %08x, " CK_STATE
				 " says %08llx",
				 dir, fname, crc, (unsigned long long)json_integer_value(jc));
	return 0;
}

/* The trainer's state into c->state_json: version 1's "state" object of state.json (jstate),
 * else the trainer file's (jstate NULL; its size and CRC were checked with every file's). */
static int ck_trainer_state(struct ckpt *c, const char *dir, json_t *jstate, struct dp_error *err)
{
	char path[CKPT_PATH_MAX], label[CKPT_PATH_MAX + 32];
	snprintf(label, sizeof(label), "%s: %s", dir, jstate ? CK_STATE : CK_TRAINER);
	if (!jstate) {
		json_error_t je;
		json_t *st;
		char *stext;
		size_t slen;
		if (ck_join(path, dir, CK_TRAINER, err) < 0 ||
		    !(stext = ck_read_small(path, &slen, err, label)))
			return -1;
		st = json_loadb(stext, slen, 0, &je);
		free(stext);
		if (!json_is_object(st)) {
			json_decref(st);
			return errprintf(err, "%s: not a JSON object", label);
		}
		c->state_json = json_dumps(st, JSON_COMPACT | JSON_PRESERVE_ORDER);
		json_decref(st);
	} else {
		c->state_json = json_dumps(jstate, JSON_COMPACT | JSON_PRESERVE_ORDER);
	}
	if (!c->state_json)
		return errprintf(err, "%s: out of memory", label);
	return 0;
}

/* ckpt_open; with check_crc 0 only the sizes are compared (cheap enough for every prune). */
static int ck_open(struct ckpt *c, const char *step_dir, int check_crc, struct dp_error *err)
{
	char dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX], label[CKPT_PATH_MAX + 32];
	const char *base, *rest, *fname;
	json_t *doc = NULL, *jfiles, *jstate, *v, *jf;
	json_error_t je;
	char *text = NULL;
	size_t len, n;
	long step;
	int rv = -1, version;

	memset(c, 0, sizeof(*c));
	n = strlen(step_dir);
	while (n > 1 && step_dir[n - 1] == '/')
		n--;
	if (n >= sizeof(dir))
		return errprintf(err, "%s: path too long", step_dir);
	memcpy(dir, step_dir, n);
	dir[n] = '\0';
	base = strrchr(dir, '/');
	base = base ? base + 1 : dir;
	if (ck_parse_step(base, &step, &rest) < 0 || *rest)
		return errprintf(err, "%s: not a checkpoint directory (its name is not step-<N>)",
				 dir);
	if (ck_join(path, dir, CK_STATE, err) < 0)
		return -1;
	snprintf(label, sizeof(label), "%s: " CK_STATE, dir);
	if (!(text = ck_read_small(path, &len, err, label)))
		goto out;
	if (!(doc = json_loadb(text, len, 0, &je))) {
		errprintf(err, "%s: invalid JSON at line %d column %d: %s", label, je.line,
			  je.column, je.text);
		goto out;
	}
	if (!json_is_object(doc)) {
		errprintf(err, "%s: not a JSON object", label);
		goto out;
	}
	v = json_object_get(doc, "format");
	if (!json_is_string(v) || strcmp(json_string_value(v), CK_FORMAT) != 0) {
		errprintf(err, "%s: \"format\" is not \"" CK_FORMAT "\"", label);
		goto out;
	}
	v = json_object_get(doc, "version");
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > CK_VERSION) {
		errprintf(err,
			  "%s: \"version\" is not 1 to %d (written by a newer dptrain version?)",
			  label, CK_VERSION);
		goto out;
	}
	version = (int)json_integer_value(v);
	v = json_object_get(doc, "step");
	if (!json_is_integer(v) || json_integer_value(v) != step) {
		errprintf(err, "%s: \"step\" does not match the directory name (step %ld)", label,
			  step);
		goto out;
	}
	jfiles = json_object_get(doc, "files");
	jstate = version == 1 ? json_object_get(doc, "state") : NULL;
	if (!json_is_object(jfiles) || (version == 1 && !json_is_object(jstate))) {
		errprintf(err, "%s: \"files\"%s must be objects", label,
			  version == 1 ? " and \"state\"" : "");
		goto out;
	}
	if (version > 1 && !json_object_get(jfiles, CK_TRAINER)) {
		errprintf(err, "%s: \"files\" does not list " CK_TRAINER, label);
		goto out;
	}
	json_object_foreach(jfiles, fname, jf)
	{
		if (ck_check_file(dir, fname, jf, check_crc, label, err) < 0)
			goto out;
	}
	if (ck_trainer_state(c, dir, version > 1 ? NULL : jstate, err) < 0)
		goto out;
	memcpy(c->path, dir, strlen(dir) + 1);
	c->step = step;
	rv = 0;
out:
	json_decref(doc);
	free(text);
	return rv;
}

int ckpt_open(struct ckpt *c, const char *step_dir, struct dp_error *err)
{
	return ck_open(c, step_dir, 1, err);
}

void ckpt_close(struct ckpt *c)
{
	if (!c)
		return;
	free(c->state_json);
	memset(c, 0, sizeof(*c));
}

static void ck_warn(char *warn, size_t warnlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ck_warn(char *warn, size_t warnlen, const char *fmt, ...)
{
	size_t used;
	va_list ap;
	if (!warn || !warnlen)
		return;
	used = strlen(warn);
	if (used && used + 1 < warnlen)
		warn[used++] = '\n', warn[used] = '\0';
	if (used + 1 >= warnlen)
		return;
	va_start(ap, fmt);
	vsnprintf(warn + used, warnlen - used, fmt, ap);
	va_end(ap);
}

int ckpt_find_latest(const char *root, ckpt_state_check check, void *check_ctx, struct ckpt *c,
		     char *warn, size_t warnlen, struct dp_error *err)
{
	char path[CKPT_PATH_MAX];
	struct dp_error why;
	struct ck_ent *v;
	size_t n;
	int missing, rv = 0;

	memset(c, 0, sizeof(*c));
	if (warn && warnlen)
		warn[0] = '\0';
	if (ck_scan(root, &v, &n, &missing, err) < 0)
		return -1;
	for (size_t i = 0; i < n && rv == 0; i++) {
		if (v[i].kind == CK_LATEST_TMP)
			continue;
		if (ck_join(path, root, v[i].name, &why) < 0) {
			ck_warn(warn, warnlen, "%s; skipped", why.text);
			continue;
		}
		if (v[i].kind != CK_STEP)
			ck_warn(warn, warnlen,
				"%s: left by an interrupted checkpoint write; skipped (the next "
				"checkpoint removes it)",
				path);
		else if (ck_open(c, path, 1, &why) < 0)
			ck_warn(warn, warnlen, "%s; skipped", why.text);
		else if (check && check(check_ctx, c->state_json, &why) < 0) {
			ck_warn(warn, warnlen, "%s: " CK_TRAINER ": %s; skipped", path, why.text);
			ckpt_close(c);
		} else
			rv = 1;
	}
	free(v);
	return rv;
}

/* Keeps the newest `keep` complete steps, just (the step just written) always one of them;
 * removes older ones, incomplete ones and leftovers of interrupted writes. Best effort: what
 * cannot be removed now is tried again after the next checkpoint. */
static void ck_prune(const char *root, long just, int keep)
{
	char path[CKPT_PATH_MAX];
	struct dp_error why;
	struct ck_ent *v;
	struct ckpt c;
	size_t n;
	int missing, kept = 1, dfd;

	if (ck_scan(root, &v, &n, &missing, &why) < 0)
		return;
	if ((dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		free(v);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		if (fstatat(dfd, v[i].name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (v[i].kind == CK_LATEST_TMP) {
			if (S_ISREG(st.st_mode))
				unlinkat(dfd, v[i].name, 0);
			continue;
		}
		if (!S_ISDIR(st.st_mode))
			continue; /* not something we made: leave it */
		if (v[i].kind == CK_STEP) {
			if (v[i].step == just)
				continue;
			if (kept < keep && ck_join(path, root, v[i].name, &why) == 0 &&
			    ck_open(&c, path, 0, &why) == 0) {
				ckpt_close(&c);
				kept++;
				continue;
			}
			/* Out of the step-<N> namespace first: removing its files one by one
			 * must never leave a step-<N>/ that a crash turns into a broken one. */
			char gone[300];
			snprintf(gone, sizeof(gone), "step-%ld.old-%ld-prune", v[i].step,
				 (long)getpid());
			if (renameat(dfd, v[i].name, dfd, gone) == 0) {
				fsync(dfd);
				ck_remove_dir(dfd, gone);
				continue;
			}
		}
		ck_remove_dir(dfd, v[i].name);
	}
	fsync(dfd); /* best effort too: nothing depends on the removals being durable */
	close(dfd);
	free(v);
}

/* Completes a writer's message with what ckpt_write knows: the path when the message lacks it,
 * and a full disk (seen in errno or in the file system's free space). */
static void ck_writer_failed(const char *tmpdir, const char *path, int e, struct dp_error *err)
{
	struct statvfs sv;
	int full = e == ENOSPC || e == EDQUOT ||
		   (statvfs(tmpdir, &sv) == 0 && sv.f_blocks > 0 && sv.f_bavail == 0);
	if (!err->text[0])
		errprintf(err, "%s: the writer failed without saying why", path);
	else if (!strstr(err->text, path))
		errprefix(err, "%s", path);
	if (full && !strstr(err->text, "disk is full"))
		errprintf(err,
			  "%s; the disk is full: free space there or set checkpoint.dir to another "
			  "disk",
			  err->text);
}

/* Puts tmp in place as final. A step that is already there is swapped out atomically where the
 * file system can (RENAME_EXCHANGE), so some complete step-<N> exists at every moment; *old is
 * then the path that holds it, for the caller to remove once the swap is durable. */
static int ck_install(const char *root, long step, const char *tmp, const char *final, char *old,
		      struct dp_error *err)
{
	struct stat st;
	int n;

	old[0] = '\0';
	if (lstat(final, &st) < 0) {
		if (errno != ENOENT)
			return errprintf(err, "%s: %s", final, strerror(errno));
		if (rename(tmp, final) < 0)
			return errprintf(err, "%s: cannot rename %s into place: %s", final, tmp,
					 strerror(errno));
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		return errprintf(err,
				 "%s: exists and is not a directory; move it out of the checkpoint "
				 "directory",
				 final);
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
		memcpy(old, tmp, strlen(tmp) + 1);
		return 0;
	}
	if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
		return errprintf(err, "%s: cannot replace it with %s: %s", final, tmp,
				 strerror(errno));
	/* No exchange here: move the old one aside (onto an empty directory of a fresh name,
	 * which rename may replace), then put the new one in place. */
	n = snprintf(old, CKPT_PATH_MAX, "%s/step-%ld.old-%ld-XXXXXX", root, step, (long)getpid());
	if (n < 0 || n >= CKPT_PATH_MAX || !mkdtemp(old)) {
		int e = errno;
		old[0] = '\0';
		return errprintf(err, "%s: cannot make room to replace it: %s%s", final,
				 strerror(e), ck_full(e));
	}
	if (rename(final, old) < 0) {
		int e = errno;
		rmdir(old);
		old[0] = '\0';
		return errprintf(err, "%s: cannot move it aside to replace it: %s", final,
				 strerror(e));
	}
	if (rename(tmp, final) < 0) {
		int e = errno;
		if (rename(old, final) == 0)
			old[0] = '\0';
		return errprintf(err, "%s: cannot rename %s into place: %s", final, tmp,
				 strerror(e));
	}
	return 0;
}

/* A ckpt_writer for text (the trainer state). */
static int ck_write_text(void *ctx, const char *path, struct dp_error *err)
{
	const char *text = ctx;
	size_t len = strlen(text);
	FILE *f = fopen(path, "wx");
	if (!f)
		return errprintf(err, "%s: %s", path, strerror(errno));
	int ok = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF;
	if (fclose(f) != 0 || !ok)
		return errprintf(err, "%s: cannot write: %s", path, strerror(errno));
	return 0;
}

int ckpt_write(const char *root, long step, const struct ckpt_file *files, int nfiles,
	       const char *state_json, int keep, struct dp_error *err)
{
	char tmp[CKPT_PATH_MAX] = "", final[CKPT_PATH_MAX], path[CKPT_PATH_MAX],
	     old[CKPT_PATH_MAX] = "", latest[64];
	json_t *state = NULL, *jfiles = NULL, *doc = NULL;
	char *text = NULL, *stext = NULL;
	json_error_t je;
	int rv = -1, n;

	if (step < 0)
		return errprintf(err, "%s: checkpoint step %ld is negative", root, step);
	if (nfiles < 0 || nfiles > CKPT_MAX_FILES)
		return errprintf(err, "%s: %d files in a checkpoint; at most %d", root, nfiles,
				 CKPT_MAX_FILES);
	for (int i = 0; i < nfiles; i++) {
		if (!ck_name_ok(files[i].name) || !files[i].write ||
		    !strcmp(files[i].name, CK_TRAINER))
			return errprintf(err,
					 "%s: checkpoint file \"%s\": not a plain file name with a "
					 "writer",
					 root, files[i].name ? files[i].name : "(null)");
		for (int j = 0; j < i; j++)
			if (!strcmp(files[i].name, files[j].name))
				return errprintf(err, "%s: checkpoint file \"%s\" given twice",
						 root, files[i].name);
	}
	state = json_loads(state_json ? state_json : "{}", 0, &je);
	if (!json_is_object(state)) {
		if (state)
			errprintf(err, "%s: checkpoint state is not a JSON object", root);
		else
			errprintf(err,
				  "%s: checkpoint state: invalid JSON at line %d column %d: %s",
				  root, je.line, je.column, je.text);
		goto out;
	}
	if (ck_mkdir_p(root, err) < 0)
		goto out;
	n = snprintf(final, sizeof(final), "%s/step-%ld", root, step);
	if (n < 0 || n >= (int)sizeof(final)) {
		errprintf(err, "%s: path too long", root);
		goto out;
	}
	n = snprintf(tmp, sizeof(tmp), "%s.tmp-%ld-XXXXXX", final, (long)getpid());
	if (n < 0 || n >= (int)sizeof(tmp) || !mkdtemp(tmp)) {
		int e = errno;
		tmp[0] = '\0';
		errprintf(err, "%s: cannot create a temporary directory: %s%s", root, strerror(e),
			  ck_full(e));
		goto out;
	}
	if (chmod(tmp, 0755) < 0) {
		errprintf(err, "%s: %s", tmp, strerror(errno));
		goto out;
	}

	/* the caller's files, then its state as one more file: checked like them on reading */
	struct ckpt_file all[CKPT_MAX_FILES + 1];
	memcpy(all, files, (size_t)nfiles * sizeof(*files));
	if (!(stext = json_dumps(state, JSON_INDENT(1) | JSON_PRESERVE_ORDER)))
		goto oom;
	all[nfiles++] = (struct ckpt_file){CK_TRAINER, ck_write_text, stext};
	files = all;
	for (int i = 0; i < nfiles; i++) {
		if (ck_join(path, tmp, files[i].name, err) < 0)
			goto out;
		err->text[0] = '\0';
		errno = 0;
		if (files[i].write(files[i].ctx, path, err) < 0) {
			ck_writer_failed(tmp, path, errno, err);
			goto out;
		}
	}
	if (!(jfiles = json_object()))
		goto oom;
	for (int i = 0; i < nfiles; i++) {
		long long bytes;
		uint32_t crc;
		if (ck_sum(tmp, files[i].name, 1, &bytes, &crc, err) < 0)
			goto out;
		if (json_object_set_new(jfiles, files[i].name,
					json_pack("{s:I,s:I}", "bytes", (json_int_t)bytes, "crc32",
						  (json_int_t)crc)) < 0)
			goto oom;
	}
	doc = json_pack("{s:s,s:i,s:I,s:O}", "format", CK_FORMAT, "version", CK_VERSION, "step",
			(json_int_t)step, "files", jfiles);
	if (!doc || !(text = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER)))
		goto oom;
	/* ck_write_atomic fsyncs tmp after the rename, which makes the whole directory durable */
	if (ck_write_atomic(tmp, CK_STATE, text, err) < 0)
		goto out;

	if (ck_install(root, step, tmp, final, old, err) < 0)
		goto out;
	tmp[0] = '\0'; /* in place: no longer ours to remove */
	if (ck_fsync_dir(root, err) < 0)
		goto out;
	if (old[0]) {
		ck_remove_path(old);
		old[0] = '\0';
	}
	snprintf(latest, sizeof(latest), "step-%ld\n", step);
	if (ck_write_atomic(root, "latest", latest, err) < 0)
		goto out;
	ck_prune(root, step, keep);
	rv = 0;
	goto out;
oom:
	errprintf(err, "%s: out of memory writing checkpoint step %ld", root, step);
out:
	if (tmp[0])
		ck_remove_path(tmp);
	/* old is set here only when step-<N> was swapped out and the root could not be synced:
	 * the next write's prune removes it */
	free(text);
	free(stext);
	json_decref(doc);
	json_decref(jfiles);
	json_decref(state);
	return rv;
}
