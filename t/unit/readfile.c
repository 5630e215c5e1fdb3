/* readfile.c (test) — common/readfile.c: a file read whole and '\0'-terminated, an empty one,
 * one of exactly the limit, and each refusal with its message and errno: missing, a directory,
 * a FIFO without a writer (at once: the open must not block), a character device, a file over
 * the limit (by its size, and a stream that grows past it), a symbolic link under O_NOFOLLOW;
 * a file whose size stat does not tell (/proc), and a descriptor read to its end in several
 * pieces. Under a mkdtemp directory in /tmp that is removed at the end. */
#define _GNU_SOURCE
#include "common/readfile.h"
#include "t/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char tmp[] = "/tmp/dptrain-readfile-XXXXXX";

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void put(const char *path, const char *text, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, text, n) != (ssize_t)n)
		bail_out("cannot write %s: %s", path, strerror(errno));
	close(fd);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void test_reads(void)
{
	char path[512];
	struct dp_error err = {""};
	char *buf;
	size_t len;

	snprintf(path, sizeof(path), "%s/table.json", tmp);
	put(path, "{\"a\": 1}\n", 9);
	ok(dp_read_file(path, 100, 0, &buf, &len, &err) == 0, "a file is read %s", err.text);
	is_int((long)len, 9, "... whole");
	ok(buf && memcmp(buf, "{\"a\": 1}\n", 9) == 0 && buf[9] == '\0',
	   "... its bytes, and a '\\0' after them");
	free(buf);
	ok(dp_read_file(path, 9, 0, &buf, &len, &err) == 0 && len == 9,
	   "exactly the limit is read %s", err.text);
	free(buf);

	snprintf(path, sizeof(path), "%s/empty", tmp);
	put(path, "", 0);
	ok(dp_read_file(path, 100, 0, &buf, &len, &err) == 0 && len == 0 && buf && !buf[0],
	   "an empty file: \"\", not NULL");
	free(buf);

	/* stat says 0 bytes; the file has more */
	ok(dp_read_file("/proc/self/status", 1 << 20, 0, &buf, &len, &err) == 0 && len > 0 &&
	       strstr(buf, "Name:"),
	   "a file whose size stat does not tell is read to its end %s", err.text);
	free(buf);
}

static void test_refusals(void)
{
	char path[512], link[600], want[1200];
	struct dp_error err = {""};
	char *buf = (char *)"x";
	size_t len = 7;
	double t0;

	snprintf(path, sizeof(path), "%s/missing.json", tmp);
	errno = 0;
	ok(dp_read_file(path, 100, 0, &buf, &len, &err) == -1, "a missing file: -1");
	snprintf(want, sizeof(want), "%s: cannot open: %s", path, strerror(ENOENT));
	is(err.text, want, "... \"cannot open\"");
	is_int(errno, ENOENT, "... errno ENOENT");
	ok(buf == NULL && len == 0, "... and no buffer");

	errno = 0;
	ok(dp_read_file(tmp, 100, 0, &buf, &len, &err) == -1, "a directory: -1");
	snprintf(want, sizeof(want), "%s: cannot read: %s", tmp, strerror(EISDIR));
	is(err.text, want, "... \"Is a directory\"");
	is_int(errno, EISDIR, "... errno EISDIR");

	snprintf(path, sizeof(path), "%s/fifo", tmp);
	if (mkfifo(path, 0600) != 0)
		bail_out("mkfifo %s: %s", path, strerror(errno));
	t0 = now();
	errno = 0;
	ok(dp_read_file(path, 100, 0, &buf, &len, &err) == -1, "a FIFO without a writer: refused");
	ok(now() - t0 < 5, "... at once, not blocked in open (%.1f s)", now() - t0);
	snprintf(want, sizeof(want), "%s: not a regular file (a FIFO)", path);
	is(err.text, want, "... saying what it is");
	is_int(errno, EINVAL, "... errno EINVAL");

	errno = 0;
	ok(dp_read_file("/dev/null", 100, 0, &buf, &len, &err) == -1, "a device: refused");
	is(err.text, "/dev/null: not a regular file (a character device)", "... saying so");
	is_int(errno, EINVAL, "... errno EINVAL");

	snprintf(path, sizeof(path), "%s/big", tmp);
	put(path, "0123456789", 10);
	errno = 0;
	ok(dp_read_file(path, 9, 0, &buf, &len, &err) == -1, "a file over the limit: refused");
	snprintf(want, sizeof(want), "%s: larger than 9 bytes", path);
	is(err.text, want, "... naming the limit");
	is_int(errno, EFBIG, "... errno EFBIG");
	ok(buf == NULL && len == 0, "... and no buffer");

	snprintf(link, sizeof(link), "%s/link", tmp);
	ok(symlink(path, link) == 0 && dp_read_file(link, 100, 0, &buf, &len, &err) == 0 &&
	       len == 10,
	   "a symbolic link is followed by default %s", err.text);
	free(buf);
	errno = 0;
	ok(dp_read_file(link, 100, O_NOFOLLOW, &buf, &len, &err) == -1 && errno == ELOOP,
	   "... and refused with O_NOFOLLOW");
	like(err.text, "link: cannot open: ", "... at the open");
	ok(dp_read_file(link, 100, O_NOFOLLOW, &buf, &len, NULL) == -1,
	   "err may be NULL (the caller words it from errno)");
}

static void test_fd(void)
{
	char path[512], want[64];
	struct dp_error err = {""};
	size_t n = 300 * 1000, len;
	char *big = malloc(n), *buf;
	int fd;

	/* more than the first buffer: grown on the way */
	for (size_t i = 0; i < n; i++)
		big[i] = (char)('a' + i % 26);
	snprintf(path, sizeof(path), "%s/stream", tmp);
	put(path, big, n);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ok(dp_read_fd(fd, "<stdin>", n, &buf, &len, &err) == 0, "a descriptor read to its end %s",
	   err.text);
	ok(len == n && memcmp(buf, big, n) == 0 && buf[n] == '\0', "... every byte, in order");
	free(buf);
	close(fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	errno = 0;
	ok(dp_read_fd(fd, "<stdin>", n - 1, &buf, &len, &err) == -1 && errno == EFBIG,
	   "one byte over the limit: refused");
	snprintf(want, sizeof(want), "<stdin>: larger than %zu bytes", n - 1);
	is(err.text, want, "... named as the caller names it");
	close(fd);
	/* a stream without end stops at the limit */
	fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	ok(dp_read_fd(fd, "zero", 100000, &buf, &len, &err) == -1 && errno == EFBIG,
	   "an endless stream stops past the limit");
	close(fd);
	free(big);
}

int main(void)
{
	if (!mkdtemp(tmp))
		bail_out("mkdtemp %s: %s", tmp, strerror(errno));
	test_reads();
	test_refusals();
	test_fd();
	nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return done_testing();
}
