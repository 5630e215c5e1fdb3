/* atomic_file.c — unit tests for common/atomic_file.c: write, overwrite, the exact mode, the
 * streaming form, failures that leave the old file and no temporary (abort, rename onto a
 * directory, a missing directory, a full disk: root only, on a small tmpfs). Everything happens
 * under a mkdtemp directory in /tmp that is removed at the end. */
#define _GNU_SOURCE
#include "common/atomic_file.h"
#include "t/lib/tap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static char base[] = "/tmp/dptrain-af-XXXXXX";

static const char *slurp(const char *path)
{
	static char buf[256];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	if (fd >= 0)
		close(fd);
	if (n < 0)
		return "(unreadable)";
	buf[n] = '\0';
	return buf;
}

/* Entries of dir other than . and ..; the names go to list (space-separated) for messages. */
static int count_entries(const char *dir, char *list, size_t listlen)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	size_t used = 0;
	list[0] = '\0';
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		n++;
		if (used < listlen)
			used += (size_t)snprintf(list + used, listlen - used, "%s ", e->d_name);
	}
	closedir(d);
	return n;
}

static void test_write(void)
{
	char dir[64], path[128], list[256];
	struct dp_error err = {""};
	struct stat st;
	mode_t old = umask(077);

	snprintf(dir, sizeof(dir), "%s/w", base);
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/f.json", dir);
	ok(af_write(path, "first\n", 6, 0644, &err) == 0, "write: %s", err.text);
	is(slurp(path), "first\n", "... content");
	ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "... mode 0644 whatever the umask");
	ok(af_write(path, "second\n", 7, 0640, &err) == 0, "overwrite: %s", err.text);
	is(slurp(path), "second\n", "... new content");
	ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640, "... and the new mode");
	ok(af_write(path, "", 0, 0644, &err) == 0, "an empty file: %s", err.text);
	ok(stat(path, &st) == 0 && st.st_size == 0, "... is empty");
	is_int(count_entries(dir, list, sizeof(list)), 1, "no temporary left: %s", list);
	umask(old);
	unlink(path);
	rmdir(dir);
}

static void test_stream(void)
{
	char dir[64], path[128], prefix[160], list[256];
	struct dp_error err = {""};
	struct af_file f;

	snprintf(dir, sizeof(dir), "%s/s", base);
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/model.bin", dir);
	ok(af_write(path, "old", 3, 0644, &err) == 0, "stream: an old file");

	ok(af_open(&f, path, 0644, &err) == 0, "af_open: %s", err.text);
	ok(af_write_chunk(&f, "ne", 2, &err) == 0 && af_write_chunk(&f, "w", 1, &err) == 0,
	   "two chunks: %s", err.text);
	is(slurp(path), "old", "... the old file stays until the commit");
	is_int(count_entries(dir, list, sizeof(list)), 2, "... next to one temporary: %s", list);
	/* ckpt.c recognises (and removes) a "latest" temporary by this prefix */
	snprintf(prefix, sizeof(prefix), "model.bin.tmp-%ld-", (long)getpid());
	like(list, prefix, "... named <file>.tmp-<pid>-");
	ok(af_commit(&f, &err) == 0, "af_commit: %s", err.text);
	is(slurp(path), "new", "... in place");
	ok(f.fd < 0 && !f.tmp && !f.path && !f.dir, "... and released");
	af_abort(&f); /* harmless once released */
	is_int(count_entries(dir, list, sizeof(list)), 1, "... no temporary left: %s", list);

	ok(af_open(&f, path, 0644, &err) == 0, "abort: opened");
	ok(af_write_chunk(&f, "partial", 7, &err) == 0, "... part written");
	af_abort(&f);
	is(slurp(path), "new", "... the old file is untouched");
	is_int(count_entries(dir, list, sizeof(list)), 1, "... no temporary left: %s", list);
	ok(af_write_chunk(&f, "x", 1, &err) == -1 && errno == EBADF,
	   "... a chunk after the abort fails");
	unlink(path);
	rmdir(dir);
}

static void test_failures(void)
{
	char dir[64], path[128], want[512], list[256];
	struct dp_error err = {""};

	snprintf(dir, sizeof(dir), "%s/f", base);
	mkdir(dir, 0755);

	snprintf(path, sizeof(path), "%s/nodir/t.json", dir);
	errno = 0;
	ok(af_write(path, "x", 1, 0644, &err) == -1 && errno == ENOENT,
	   "a missing directory: fails with ENOENT");
	snprintf(want, sizeof(want),
		 "%s: cannot create a temporary file in %s/nodir: No such file or directory", path,
		 dir);
	is(err.text, want, "... the message names the directory");

	snprintf(path, sizeof(path), "%s/", dir);
	ok(af_write(path, "x", 1, 0644, &err) == -1, "a path ending in /: fails");
	snprintf(want, sizeof(want), "%s: not a file name", path);
	is(err.text, want, "... saying it is not a file name");

	/* rename(2) cannot put a file over a directory: the last step fails, after the write */
	snprintf(path, sizeof(path), "%s/adir", dir);
	mkdir(path, 0755);
	ok(af_write(path, "x", 1, 0644, &err) == -1 && errno == EISDIR,
	   "over a directory: fails at the rename (EISDIR)");
	like(err.text, "cannot rename ", "... saying so: %s", err.text);
	struct stat st;
	ok(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "... the directory stays");
	is_int(count_entries(dir, list, sizeof(list)), 1, "... no temporary left: %s", list);
	rmdir(path);

	snprintf(path, sizeof(path), "t.json");
	err.text[0] = '\0';
	ok(chdir(dir) == 0 && af_write(path, "rel", 3, 0644, &err) == 0,
	   "a bare file name: written in the working directory: %s", err.text);
	is(slurp(path), "rel", "... content");
	unlink(path);
	if (chdir("/") != 0)
		diag("chdir /: %s", strerror(errno));
	rmdir(dir);
}

static void test_full_disk(void)
{
	static char big[1 << 20];
	char mnt[64], path[128], list[256];
	struct dp_error err = {""};
	const int n = 6;

	if (geteuid() != 0) {
		skip(n, "full disk: needs root to mount a small tmpfs");
		return;
	}
	snprintf(mnt, sizeof(mnt), "%s/small", base);
	mkdir(mnt, 0755);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=64k") < 0) {
		skip(n, "full disk: cannot mount a tmpfs on %s: %s", mnt, strerror(errno));
		rmdir(mnt);
		return;
	}
	snprintf(path, sizeof(path), "%s/f", mnt);
	ok(af_write(path, "old", 3, 0644, &err) == 0, "full disk: a small file fits");
	memset(big, 'x', sizeof(big));
	errno = 0;
	ok(af_write(path, big, sizeof(big), 0644, &err) == -1,
	   "a 1 MiB file on a 64 KiB disk fails");
	is_int(errno, ENOSPC, "... with errno ENOSPC, for callers' advice");
	like(err.text, "No space left on device", "... saying why: %s", err.text);
	is(slurp(path), "old", "... the old file is untouched");
	is_int(count_entries(mnt, list, sizeof(list)), 1, "... no temporary left: %s", list);
	if (umount2(mnt, MNT_DETACH) < 0)
		diag("umount %s: %s", mnt, strerror(errno));
	rmdir(mnt);
}

int main(void)
{
	if (!mkdtemp(base))
		bail_out("mkdtemp %s: %s", base, strerror(errno));
	test_write();
	test_stream();
	test_failures();
	test_full_disk();
	if (rmdir(base) < 0)
		diag("rmdir %s: %s", base, strerror(errno));
	return done_testing();
}
