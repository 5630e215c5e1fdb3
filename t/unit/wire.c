/* wire.c — unit tests of task/wire.c, the records dptrain-launch's helper sends the SPANK
 * plugin: framing and walking them, the first record's limit and protocol version, the
 * refusal of a launcher of another version (or of none) with a message naming it, both
 * versions and what to do, before any later record is read; then the real dptrain-launch
 * --wire-up=FD on a socket pair (one rank, the env source): its first record carries this
 * version, every record is of a known kind, the last is the end. */
#include "common/error.h"
#include "t/lib/tap.h"
#include "task/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LAUNCHER "/opt/dptrain/bin/dptrain-launch"

/* The records in buf[0..len) as "KIND=VALUE;..." (the value of E kept whole). */
static const char *walk(char *buf, size_t len)
{
	static char out[4096];
	struct wire_rec r;
	size_t off = 0, n = 0;

	out[0] = '\0';
	while (wire_next(buf, len, &off, &r) && n < sizeof(out) - 1)
		n += (size_t)snprintf(out + n, sizeof(out) - n, "%c=%s;", r.kind, r.value);
	return out;
}

static void test_framing(void)
{
	char buf[256], v[WIRE_LIMIT_MAX];
	size_t len = 0, n;
	char *rec;
	const struct {
		char kind;
		const char *value;
	} recs[] = {{WIRE_LIMIT, "630 1"}, {WIRE_ENV, "RANK=3"}, {WIRE_LOG, "/o/device3/train.log"},
		    {WIRE_TEE, "1"},	   {WIRE_LOCK, ""},	 {WIRE_END, ""}};

	for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++) {
		rec = wire_record(recs[i].kind, recs[i].value, &n);
		ok(rec != NULL, "wire_record %c", recs[i].kind);
		is_int(n, strlen(recs[i].value) + 2, "... kind byte, value, NUL");
		memcpy(buf + len, rec, n);
		len += n;
		free(rec);
	}
	is_int(buf[0], 'D', "a record starts with its kind");
	is(walk(buf, len), "D=630 1;E=RANK=3;L=/o/device3/train.log;T=1;K=;Z=;",
	   "wire_next walks every record, empty values included");
	is(walk(buf, len - 1), "D=630 1;E=RANK=3;L=/o/device3/train.log;T=1;K=;",
	   "a record without its NUL (a helper that died mid-record) is not read");
	is(walk(buf, 3), "", "... nor part of the first");

	wire_limit_value(v, 630);
	is(v, "630 1 " DPTRAIN_VERSION,
	   "the first record's value: the limit, the version, then dptrain's release");
	is_int(WIRE_VERSION, 1, "this is version 1");
	is_int(WIRE_LIMIT, 'D', "kinds are the bytes on the socket: D seconds");
	ok(WIRE_ENV == 'E' && WIRE_LOG == 'L' && WIRE_TEE == 'T' && WIRE_STOP_BLOCKED == 'S' &&
	       WIRE_CWD == 'C' && WIRE_SCHED_LOG == 'M' && WIRE_LOCK == 'K' && WIRE_END == 'Z',
	   "... E variable, L log, T tee, S stop blocked, C directory, M scheduler, K lock, Z end");
}

/* wire_check_first on the bytes s[0..len) */
static int first(const char *s, size_t len, int *limit, struct dp_error *err)
{
	err->text[0] = '\0';
	*limit = -1;
	return wire_check_first(s, len, LAUNCHER, limit, err);
}

static void test_first(void)
{
	static const char future[] = "D60 2\0EMASTER_PORT=1\0Z";
	struct dp_error err;
	int limit;

	is_int(first("", 0, &limit, &err), 0, "nothing yet: wait");
	is_int(first("D63", 3, &limit, &err), 0, "the first record not complete yet: wait");
	is_int(first("D630 1\0", 7, &limit, &err), 1, "D<seconds> <version> of this version");
	is_int(limit, 630, "... its limit");
	is_int(first("D60\0Z\0", 6, &limit, &err), 1,
	       "D<seconds> alone: a launcher from before the version, which speaks version 1");
	is_int(limit, 60, "... its limit");
	is_int(first("D0 1\0", 5, &limit, &err), 1, "a limit of 0 s");
	is_int(limit, 0, "... is 0");
	is_int(first("D60 1 more\0", 11, &limit, &err), 1,
	       "what a later field adds after a space is not this version's to read");

	is_int(first(future, sizeof(future) - 1, &limit, &err), -1,
	       "version 2: refused as soon as its first record is complete");
	is(err.text,
	   "the launcher " LAUNCHER
	   " speaks wire-up protocol 2, this plugin (dptrain.so " DPTRAIN_VERSION
	   ") 1: install the same dptrain version of plugin and launcher on every "
	   "node",
	   "... naming the launcher, both versions and what to do");
	is_int(first("D60 2 9.1.0\0", 12, &limit, &err), -1, "version 2 with its release");
	is(err.text,
	   "the launcher " LAUNCHER " (dptrain-launch 9.1.0) speaks wire-up protocol 2, this "
	   "plugin (dptrain.so " DPTRAIN_VERSION ") 1: install the same dptrain version of plugin "
	   "and launcher on every node",
	   "... naming both releases too");
	is_int(limit, -1, "... and no limit is taken from it");
	is_int(first("D60 2\0", 6, &limit, &err), -1, "... whatever follows it, or nothing");
	is_int(first("D60 0\0", 6, &limit, &err), -1, "version 0 is another version");
	like(err.text, "speaks wire-up protocol 0, this plugin (dptrain.so " DPTRAIN_VERSION ") 1",
	     "... named so");

	is_int(first("EPATH=/bin", 10, &limit, &err), -1,
	       "a first record that is not D: refused at its first byte");
	is(err.text,
	   "the launcher " LAUNCHER " does not speak the wire-up protocol: its answer starts with "
	   "'E', not D (this plugin speaks version 1): install the same dptrain version of plugin "
	   "and launcher on every node",
	   "... naming what it sent");
	is_int(first("\001x", 2, &limit, &err), -1, "a control byte first");
	like(err.text, "starts with byte 1, not D", "... shown as a number");
	is_int(first("Dsixty\0", 7, &limit, &err), -1, "a limit that is not a number");
	like(err.text, "sent a first record the wire-up protocol 1 cannot read ('Dsixty')",
	     "... is not read as one");
	is_int(first("D60 \0", 5, &limit, &err), -1, "a space without a version");
	is_int(first("D60 1x\0", 7, &limit, &err), -1, "a version with something stuck to it");
	is_int(first("D99999999999 1\0", 15, &limit, &err), -1, "a limit past INT_MAX");
	is_int(first("D-5 1\0", 6, &limit, &err), -1, "a negative limit");
}

/* dptrain-launch --wire-up=3 for a one-rank job (env source) in dir: its records in buf. */
static ssize_t run_helper(const char *launcher, const char *dir, char *buf, size_t cap)
{
	int sv[2], status;
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		bail_out("socketpair: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		bail_out("fork: %s", strerror(errno));
	if (pid == 0) {
		char out[1200];
		int null = open("/dev/null", O_WRONLY);

		if (dup2(sv[1], 3) < 0)
			_exit(126);
		if (null >= 0)
			dup2(null, STDOUT_FILENO);
		snprintf(out, sizeof(out), "%s/out", dir);
		setenv("DPTRAIN_SOURCE", "env", 1);
		setenv("RANK", "0", 1);
		setenv("WORLD_SIZE", "1", 1);
		setenv("LOCAL_RANK", "0", 1);
		setenv("LOCAL_WORLD_SIZE", "1", 1);
		setenv("MASTER_ADDR", "127.0.0.1", 1);
		setenv("MASTER_PORT", "29511", 1);
		setenv("DPTRAIN_OUTPUT_DIR", out, 1);
		setenv("DPTRAIN_STORE_SECRET", "0123456789abcdef0123456789abcdef", 1);
		unsetenv("DPTRAIN_CONFIG");
		unsetenv("PMIX_RANK");
		unsetenv("SLURM_PROCID");
		unsetenv("SLURM_JOB_ID");
		execl(launcher, launcher, "--wire-up=3", "--", "true", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	while (len < cap && (n = read(sv[0], buf + len, cap - len)) > 0)
		len += (size_t)n;
	close(sv[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		diag("%s exited with wait status 0x%x", launcher, status);
		return -1;
	}
	return (ssize_t)len;
}

static void test_helper(void)
{
	const char *build = getenv("DPTRAIN_BUILD_DIR");
	char launcher[1024], dir[] = "/tmp/dptrain-wire-XXXXXX", buf[65536], cmd[1200];
	struct wire_rec r;
	struct dp_error err;
	struct stat st;
	size_t off = 0;
	ssize_t len;
	int limit = -1, unknown = 0, n = 0, last = 0, env = 0;

	snprintf(launcher, sizeof(launcher), "%s/bin/dptrain-launch", build ? build : "build");
	if (stat(launcher, &st) != 0) {
		skip(7, "no %s (run through make check-unit)", launcher);
		return;
	}
	if (!mkdtemp(dir))
		bail_out("mkdtemp: %s", strerror(errno));
	len = run_helper(launcher, dir, buf, sizeof(buf));
	ok(len > 0, "dptrain-launch --wire-up=3 answers on descriptor 3");
	if (len <= 0) {
		skip(6, "no answer");
		return;
	}
	is_int(wire_check_first(buf, (size_t)len, launcher, &limit, &err), 1,
	       "its first record is D of this version");
	is_int(limit, 2 * 300 + 30, "... with its limit: twice the rendezvous timeout + 30 s");
	ok(strcmp(buf, "D630 1 " DPTRAIN_VERSION) == 0, "... spelled D630 1 " DPTRAIN_VERSION);
	while (wire_next(buf, (size_t)len, &off, &r)) {
		n++;
		last = r.kind;
		env += r.kind == WIRE_ENV && strncmp(r.value, "RANK_TABLE_FILE=", 16) == 0;
		unknown += !strchr("DELTSCMKZ", r.kind);
	}
	ok(off == (size_t)len && n > 3, "%d records, nothing after the last", n);
	ok(!unknown && last == WIRE_END, "every record of a known kind, the last the end");
	ok(env == 1, "the variables come as E records (RANK_TABLE_FILE among them)");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
}

int main(void)
{
	test_framing();
	test_first();
	test_helper();
	return done_testing();
}
