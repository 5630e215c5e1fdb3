/* tbevents.c (test) — trainer/tbevents.c: CRC-32C against the published check values (RFC
 * 3720's and the "123456789" one), the record's mask and framing, the bytes of a scalar Event
 * as event.proto and summary.proto define them, the file's name and its first two records
 * (the file version, SessionLog START), a new file per open, a file that stops growing (a full
 * disk: RLIMIT_FSIZE, in a child) left at a record's end with the failure said once, and a
 * struct that was never opened doing nothing. t/t0920-tensorboard.t reads a real run's file with
 * protoc's Python classes. Everything happens under a mkdtemp directory, removed at the end. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trainer/tbevents.h"
#include "t/lib/tap.h"

static char tmp[] = "/tmp/dptrain-tbevents-XXXXXX";

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t cap = 0, n = 0, got;
	if (!f)
		return NULL;
	do {
		if (n + 4096 > cap) {
			uint8_t *g = realloc(buf, cap = cap * 2 + 8192);
			if (!g) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = g;
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
	} while (got > 0);
	fclose(f);
	*len = n;
	return buf;
}

static uint64_t le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;
	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* The records of a file: each one's data and length into data[]/len[]; -1 at a record that is
 * cut short or has a wrong CRC (why says which), else the count. */
static int records(const uint8_t *f, size_t n, const uint8_t **data, size_t *len, int max,
		   char *why, size_t wlen)
{
	size_t at = 0;
	int k = 0;
	while (at < n && k < max) {
		if (n - at < 12) {
			snprintf(why, wlen, "record %d: %zu bytes of a 12-byte header", k, n - at);
			return -1;
		}
		uint64_t l = le(f + at, 8);
		if (le(f + at + 8, 4) != tb_mask_crc(tb_crc32c(f + at, 8))) {
			snprintf(why, wlen, "record %d: the length's CRC is wrong", k);
			return -1;
		}
		if (l > n - at - 12 || n - at - 12 - l < 4) {
			snprintf(why, wlen, "record %d: cut short", k);
			return -1;
		}
		if (le(f + at + 12 + l, 4) != tb_mask_crc(tb_crc32c(f + at + 12, l))) {
			snprintf(why, wlen, "record %d: the data's CRC is wrong", k);
			return -1;
		}
		data[k] = f + at + 12;
		len[k++] = l;
		at += 16 + l;
	}
	return k;
}

static double now(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* An Event's head: key 1 (64-bit) with a wall time in [t0, t1], then the rest, which must be
 * want[0..wn). */
static int event_is(const uint8_t *d, size_t n, double t0, double t1, const uint8_t *want,
		    size_t wn)
{
	if (n != 9 + wn || d[0] != 0x09)
		return 0;
	uint64_t bits = le(d + 1, 8);
	double t;
	memcpy(&t, &bits, sizeof(t));
	return t >= t0 - 1e-3 && t <= t1 + 1e-3 && memcmp(d + 9, want, wn) == 0;
}

static void test_crc(void)
{
	uint8_t b[32];
	is_int(tb_crc32c("123456789", 9), 0xe3069283, "CRC-32C(\"123456789\") = 0xE3069283");
	is_int(tb_crc32c("", 0), 0, "CRC-32C of nothing = 0");
	memset(b, 0, sizeof(b));
	is_int(tb_crc32c(b, 32), 0x8a9136aa, "32 zeros: 0x8A9136AA (RFC 3720 B.4)");
	memset(b, 0xff, sizeof(b));
	is_int(tb_crc32c(b, 32), 0x62a8ab43, "32 0xFF bytes: 0x62A8AB43");
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)i;
	is_int(tb_crc32c(b, 32), 0x46dd794e, "0..31: 0x46DD794E");
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)(31 - i);
	is_int(tb_crc32c(b, 32), 0x113fdb5c, "31..0: 0x113FDB5C");
	is_int(tb_mask_crc(0xe3069283), 0xc78ab0e5,
	       "the mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8");

	/* a record: length, its masked CRC, the data, its masked CRC, little endian */
	uint8_t rec[16 + 9];
	size_t n = tb_frame(rec, "123456789", 9);
	uint8_t head[8] = {9, 0, 0, 0, 0, 0, 0, 0};
	ok(n == 25 && memcmp(rec, head, 8) == 0, "the record starts with the length as uint64 LE");
	ok(le(rec + 8, 4) == tb_mask_crc(tb_crc32c(head, 8)),
	   "then the masked CRC of those 8 bytes");
	ok(memcmp(rec + 12, "123456789", 9) == 0 && le(rec + 21, 4) == 0xc78ab0e5,
	   "then the data and its masked CRC (0xC78AB0E5 for \"123456789\")");
}

/* The one event file in dir (its name into name); NULL if there is not exactly one. */
static uint8_t *only_file(const char *dir, char *name, size_t nlen, size_t *len, int *count)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	*count = 0;
	if (!d)
		return NULL;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "events.out.tfevents.", 20)) {
			snprintf(name, nlen, "%s/%s", dir, e->d_name);
			++*count;
		}
	closedir(d);
	return *count == 1 ? slurp(name, len) : NULL;
}

static void test_file(void)
{
	char dir[256], path[600], want_name[1024], host[256] = "";
	struct tbevents tb = {0};
	struct dp_error err = {0};
	const uint8_t *data[16];
	size_t len[16], n;
	int count;
	char why[200] = "";

	snprintf(dir, sizeof(dir), "%s/plain", tmp);
	mkdir(dir, 0755);
	double t0 = now();
	long s0 = (long)time(NULL);
	ok(tb_open(&tb, dir, 301, &err) == 0 && tb.open, "tb_open on a directory: %s", err.text);
	tb_scalar(&tb, "train/loss", 300, 0.5);
	tb_scalars(&tb, 300, 2, (const char *const[]){"eval/accuracy", "eval/loss"},
		   (const double[]){0.25, -2.0});
	double t1 = now();
	long s1 = (long)time(NULL);
	uint8_t *f = only_file(dir, path, sizeof(path), &n, &count);
	ok(f && count == 1, "one file named events.out.tfevents.* (%d)", count);
	gethostname(host, sizeof(host) - 1);
	int good_name = 0;
	for (long s = s0; s <= s1; s++) {
		snprintf(want_name, sizeof(want_name), "%s/events.out.tfevents.%010ld.%s.%ld.", dir,
			 s, host, (long)getpid());
		good_name |= !strncmp(path, want_name, strlen(want_name));
	}
	ok(good_name, "named events.out.tfevents.SECONDS.HOST.PID.N: %s", path);
	is(tb.path, path, "tb.path names it");
	int k = f ? records(f, n, data, len, 16, why, sizeof(why)) : -1;
	ok(k == 4, "4 whole records with the right CRCs (%d) %s", k, why);
	if (k != 4) {
		skip(4, "no records");
		free(f);
		tb_close(&tb);
		return;
	}
	/* Event{wall_time, step 0, file_version = "brain.Event:2"} */
	static const uint8_t ver[] = {0x10, 0x00, 0x1a, 13,  'b', 'r', 'a', 'i', 'n',
				      '.',  'E',  'v',	'e', 'n', 't', ':', '2'};
	ok(event_is(data[0], len[0], t0, t1, ver, sizeof(ver)),
	   "the first: wall_time, step 0, file_version \"brain.Event:2\"");
	/* Event{wall_time, step 301, session_log = SessionLog{status START}} */
	static const uint8_t start[] = {0x10, 0xad, 0x02, 0x3a, 0x02, 0x08, 0x01};
	ok(event_is(data[1], len[1], t0, t1, start, sizeof(start)),
	   "the second: SessionLog START at the first step (301)");
	/* Event{step 300, summary = Summary{value = Value{tag, simple_value 0.5f}}} */
	static const uint8_t loss[] = {0x10, 0xac, 0x02, 0x2a, 19,   0x0a, 17,	 0x0a,
				       10,   't',  'r',	 'a',  'i',  'n',  '/',	 'l',
				       'o',  's',  's',	 0x15, 0x00, 0x00, 0x00, 0x3f};
	ok(event_is(data[2], len[2], t0, t1, loss, sizeof(loss)),
	   "a scalar: step 300, Summary{Value{tag \"train/loss\", simple_value 0.5f}}");
	static const uint8_t two[] = {
	    0x10, 0xac, 0x02, 0x2a, 40,	 0x0a, 20,  0x0a, 13,	'e',  'v',  'a',  'l',	'/',  'a',
	    'c',  'c',	'u',  'r',  'a', 'c',  'y', 0x15, 0x00, 0x00, 0x80, 0x3e, 0x0a, 16,   0x0a,
	    9,	  'e',	'v',  'a',  'l', '/',  'l', 'o',  's',	's',  0x15, 0x00, 0x00, 0x00, 0xc0};
	ok(event_is(data[3], len[3], t0, t1, two, sizeof(two)),
	   "two scalars of a step in one Event's Summary (0.25f, -2.0f)");
	free(f);

	/* a second open: another file; the first is left as it was */
	struct tbevents tb2 = {0};
	ok(tb_open(&tb2, dir, 1, &err) == 0 && strcmp(tb2.path, tb.path) != 0,
	   "a second tb_open makes a new file: %s", tb2.path);
	tb_close(&tb2);
	tb_close(&tb);
	ok(!tb.open, "tb_close: no file");
	tb_close(&tb);
	pass("tb_close twice is harmless");

	/* a file already there whose seconds are not older (a clock behind): the new one sorts
	 * after it, as TensorBoard needs to read it */
	char later[700];
	long ahead = (long)time(NULL) + 1000;
	snprintf(dir, sizeof(dir), "%s/order", tmp);
	mkdir(dir, 0755);
	snprintf(later, sizeof(later), "%s/events.out.tfevents.%010ld.zz.1.0", dir, ahead);
	FILE *lf = fopen(later, "w");
	if (lf)
		fclose(lf);
	ok(tb_open(&tb2, dir, 1, &err) == 0, "tb_open beside a newer file: %s", err.text);
	snprintf(want_name, sizeof(want_name), "%s/events.out.tfevents.%010ld.", dir, ahead + 1);
	ok(!strncmp(tb2.path, want_name, strlen(want_name)) && strcmp(tb2.path, later) > 0,
	   "its name has the newest file's seconds + 1 and sorts after it: %s", tb2.path);
	tb_close(&tb2);

	struct tbevents none = {0};
	tb_scalar(&none, "x", 1, 1.0);
	tb_close(&none);
	pass("without a file, tb_scalar and tb_close do nothing");

	snprintf(dir, sizeof(dir), "%s/missing", tmp);
	struct tbevents bad = {.open = 1};
	ok(tb_open(&bad, dir, 1, &err) == -1 && !bad.open, "a missing directory: -1, no file");
	snprintf(want_name, sizeof(want_name), "%s/events.out.tfevents.", dir);
	ok(!strncmp(err.text, want_name, strlen(want_name)) &&
	       strstr(err.text, ": cannot create: ") && strstr(err.text, strerror(ENOENT)),
	   "the error names the file and why: %s", err.text);
}

/* A file that can grow no more (RLIMIT_FSIZE in a child, as a full disk cuts a write): every
 * record before stays whole, the cut one is taken back, the failure is said once. */
static void test_full(void)
{
	char dir[256], path[600], errpath[300], why[200] = "";
	const long limit = 600;
	const uint8_t *data[64];
	size_t len[64], n;
	int status = -1, count;

	snprintf(dir, sizeof(dir), "%s/full", tmp);
	mkdir(dir, 0755);
	snprintf(errpath, sizeof(errpath), "%s/stderr", tmp);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int efd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (efd < 0 || dup2(efd, 2) < 0)
			_exit(3);
		struct tbevents tb;
		struct dp_error err;
		struct rlimit rl = {(rlim_t)limit, (rlim_t)limit};
		signal(SIGXFSZ, SIG_IGN);
		if (setrlimit(RLIMIT_FSIZE, &rl) < 0 || tb_open(&tb, dir, 1, &err) < 0)
			_exit(2);
		for (int i = 0; i < 40; i++)
			tb_scalars(&tb, i + 1, 2, (const char *const[]){"train/loss", "train/lr"},
				   (const double[]){2.5 / (i + 1), 0.1});
		tb_close(&tb);
		_exit(0);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "writing past the limit neither crashes nor stops the writer (status %d)", status);
	uint8_t *f = only_file(dir, path, sizeof(path), &n, &count);
	int k = f ? records(f, n, data, len, 64, why, sizeof(why)) : -1;
	ok(f && n <= (size_t)limit && k >= 5,
	   "the file holds whole records only, within the limit (%zu bytes, %d records) %s", n, k,
	   why);
	free(f);
	size_t elen;
	char *e = (char *)slurp(errpath, &elen), want[700];
	if (e) {
		char *g = realloc(e, elen + 1);
		if (g)
			g[elen] = '\0';
		e = g;
	}
	snprintf(want, sizeof(want), "dptrain: warning: %s: cannot write an event (", path);
	int said = 0;
	for (const char *q = e; q && (q = strstr(q, "cannot write an event")); q++)
		said++;
	ok(e && strstr(e, want) && strstr(e, "training goes on") && said == 1,
	   "the failure is said once, naming the file: %s", e ? e : "(nothing)");
	free(e);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int main(void)
{
	if (!mkdtemp(tmp))
		bail_out("mkdtemp: %s", strerror(errno));
	test_crc();
	test_file();
	test_full();
	nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return done_testing();
}
