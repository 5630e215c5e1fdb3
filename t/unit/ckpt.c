/* ckpt.c — unit tests for checkpoint directories (trainer/ckpt/ckpt.c): write/open round trip,
 * pruning to `keep`, every kind of damaged step skipped by ckpt_find_latest with a warning
 * naming it (the caller's state too: its file's CRC, and the caller's own check of it), a
 * version-1 checkpoint still read, a writer failing midway, replacing a step, a full disk
 * (root only, on a small tmpfs). Everything happens under a mkdtemp directory in /tmp that is
 * removed at the end. */
#define _GNU_SOURCE
#include "common/error.h"
#include "trainer/ckpt/ckpt.h"
#include "t/lib/tap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct blob {
	const unsigned char *data;
	size_t len;
	int fail; /* write half, then fail */
};

static int write_blob(void *ctx, const char *path, struct dp_error *err)
{
	const struct blob *b = ctx;
	size_t want = b->fail ? b->len / 2 : b->len, done = 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		errprintf(err, "%s: cannot create: %s", path, strerror(errno));
		return -1;
	}
	while (done < want) {
		ssize_t put = write(fd, b->data + done, want - done);
		if (put < 0) {
			int e = errno;
			errprintf(err, "%s: write failed: %s", path, strerror(e));
			close(fd);
			errno = e;
			return -1;
		}
		done += (size_t)put;
	}
	close(fd);
	if (b->fail) {
		errprintf(err, "%s: simulated failure after %zu bytes", path, done);
		return -1;
	}
	return 0;
}

static unsigned char model[1000], optim[500];
static struct blob bmodel = {model, sizeof(model), 0}, boptim = {optim, sizeof(optim), 0};

static int put(const char *root, long step, int keep, struct dp_error *err)
{
	struct ckpt_file f[2] = {{"model.safetensors", write_blob, &bmodel},
				 {"optim.bin", write_blob, &boptim}};
	char state[64];
	snprintf(state, sizeof(state), "{\"step_seen\": %ld}", step);
	return ckpt_write(root, step, f, 2, state, keep, err);
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0;
	if (!f)
		return NULL;
	*len = 0;
	for (;;) {
		if (*len + 4096 + 1 > cap) {
			char *g = realloc(buf, cap = cap * 2 + 8192);
			if (!g)
				break;
			buf = g;
		}
		size_t got = fread(buf + *len, 1, cap - *len - 1, f);
		*len += got;
		if (got == 0)
			break;
	}
	fclose(f);
	if (buf)
		buf[*len] = '\0';
	return buf;
}

static int same_file(const char *path, const unsigned char *data, size_t len)
{
	size_t got;
	char *buf = slurp(path, &got);
	int same = buf && got == len && memcmp(buf, data, len) == 0;
	free(buf);
	return same;
}

/* Names in dir that contain needle; names joined by ' ' into list when given. */
static int count_names(const char *dir, const char *needle, char *list, size_t listlen)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	if (list && listlen)
		list[0] = '\0';
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || !strstr(e->d_name, needle))
			continue;
		n++;
		if (list && strlen(list) + strlen(e->d_name) + 2 < listlen) {
			if (list[0])
				strcat(list, " ");
			strcat(list, e->d_name);
		}
	}
	closedir(d);
	return n;
}

static int exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static char base[64];

static void path_of(char *out, size_t len, const char *a, const char *b)
{
	snprintf(out, len, "%s/%s", a, b);
}

static void test_round_trip(void)
{
	char root[256], p[512], warn[2048];
	struct dp_error err;
	struct ckpt c;
	size_t len;
	char *text;
	struct ckpt_file f[2] = {{"model.safetensors", write_blob, &bmodel},
				 {"optim.bin", write_blob, &boptim}};

	path_of(root, sizeof(root), base, "a/checkpoints"); /* two levels to create */
	is_int(ckpt_write(root, 10, f, 2, "{\"epoch\": 1, \"lr\": 0.001, \"rng\": [1, 2, 3]}", 3,
			  &err),
	       0, "round trip: write step 10 into a directory that does not exist yet");
	snprintf(p, sizeof(p), "%s/step-10", root);
	if (!is_int(ckpt_open(&c, p, &err), 0, "ckpt_open accepts it"))
		diag("%s", err.text);
	is_int(c.step, 10, "step from the directory");
	is(c.state_json, "{\"epoch\":1,\"lr\":0.001,\"rng\":[1,2,3]}", "state comes back");
	is(c.path, p, "path is the step directory");
	ckpt_close(&c);
	snprintf(p, sizeof(p), "%s/step-10/model.safetensors", root);
	ok(same_file(p, model, sizeof(model)), "model.safetensors has the writer's bytes");
	snprintf(p, sizeof(p), "%s/step-10/optim.bin", root);
	ok(same_file(p, optim, sizeof(optim)), "optim.bin has the writer's bytes");
	snprintf(p, sizeof(p), "%s/step-10/state.json", root);
	text = slurp(p, &len);
	like(text ? text : "", "\"format\": \"dptrain-checkpoint\"", "state.json names its format");
	like(text ? text : "", "\"bytes\": 1000", "state.json lists the model's size");
	free(text);
	snprintf(p, sizeof(p), "%s/latest", root);
	text = slurp(p, &len);
	is(text ? text : "(none)", "step-10\n", "latest names step-10");
	free(text);
	is_int(count_names(root, "tmp", NULL, 0), 0, "no temporary left in root");
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "find_latest finds it");
	is_int(c.step, 10, "... step 10");
	is(warn, "", "... without warnings");
	ckpt_close(&c);

	is_int(ckpt_write(root, 11, f, 2, "{not json", 3, &err), -1,
	       "invalid state JSON is refused");
	like(err.text, "invalid JSON", "... saying so: %s", err.text);
	is_int(ckpt_write(root, 11, f, 2, "[1]", 3, &err), -1,
	       "a state that is not an object is refused");
	struct ckpt_file bad[1] = {{"../evil", write_blob, &bmodel}};
	is_int(ckpt_write(root, 11, bad, 1, "{}", 3, &err), -1,
	       "a file name with a slash is refused");
	snprintf(p, sizeof(p), "%s/step-11", root);
	ok(!exists(p), "no step-11 after the refusals");
}

static void test_prune(void)
{
	char root[256], list[512], p[512];
	struct dp_error err;
	size_t len;
	char *text;
	int rc = 0;

	path_of(root, sizeof(root), base, "prune");
	for (long s = 20; s <= 50; s += 10)
		rc |= put(root, s, 2, &err);
	if (!is_int(rc, 0, "prune: 4 writes with keep=2"))
		diag("%s", err.text);
	is_int(count_names(root, "step-", list, sizeof(list)), 2, "2 steps remain: %s", list);
	snprintf(p, sizeof(p), "%s/step-40", root);
	ok(exists(p), "step-40 kept");
	snprintf(p, sizeof(p), "%s/step-50", root);
	ok(exists(p), "step-50 kept");
	snprintf(p, sizeof(p), "%s/latest", root);
	text = slurp(p, &len);
	is(text ? text : "(none)", "step-50\n", "latest points at the newest");
	free(text);
	/* keep=1 while writing an older step than the newest: the one written survives */
	is_int(put(root, 45, 1, &err), 0, "write step 45 with keep=1");
	snprintf(p, sizeof(p), "%s/step-45", root);
	ok(exists(p), "the step just written is never pruned");
	is_int(count_names(root, "step-", list, sizeof(list)), 1, "only it remains: %s", list);

	/* Regression (contrib/bench/crash-consistency.sh): a crash while a prune removed a step's
	 * files one by one left a step-N/ missing some of them. A prune now renames the step out
	 * of the step-N names first, so a crash leaves at most a step-N.old-*-prune leftover,
	 * which is never taken for a checkpoint and goes with the next write. */
	struct ckpt c;
	char warn[2048];
	pid_t pid = fork();
	if (pid == 0) { /* a process that dies half way through removing the pruned step-45 */
		setenv("DPTRAIN_TEST_CKPT_CRASH_IN_REMOVE", "1", 1);
		put(root, 47, 1, &err);
		_exit(0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 99, "a write that crashes in its prune");
	snprintf(p, sizeof(p), "%s/step-45", root);
	ok(!exists(p), "... left no step-45 with some of its files (it was renamed first)");
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "... the new step is whole");
	is_int(c.step, 47, "... step-47");
	ckpt_close(&c);
	snprintf(p, sizeof(p), "%s/step-44.old-77-prune", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/step-44.old-77-prune/state.json", root);
	write_text(p, "{\"format\": \"dptrain-checkpoint\"}");
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "a half-pruned step is not a checkpoint");
	is_int(c.step, 47, "... step-47 is taken");
	ckpt_close(&c);
	is_int(put(root, 48, 1, &err), 0, "the next write");
	ok(!exists(p), "... removes the half-pruned leftover");
	is_int(count_names(root, ".old-", list, sizeof(list)), 0,
	       "... and its own prune leaves no .old- directory: %s", list);
}

static void test_damage(void)
{
	char root[256], p[512], warn[4096];
	struct dp_error err;
	struct ckpt c;
	FILE *f;

	path_of(root, sizeof(root), base, "damage");
	is_int(put(root, 1, 100, &err), 0, "damage: a valid step-1 first");

	/* truncated */
	put(root, 2, 100, &err);
	snprintf(p, sizeof(p), "%s/step-2/model.safetensors", root);
	ok(truncate(p, 100) == 0, "truncate step-2/model.safetensors");
	snprintf(p, sizeof(p), "%s/step-2", root);
	is_int(ckpt_open(&c, p, &err), -1, "ckpt_open refuses a truncated file");
	like(err.text, "step-2: model.safetensors: 100 bytes, state.json says 1000 (truncated?)",
	     "... saying which and how: %s", err.text);
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "find_latest falls back");
	is_int(c.step, 1, "... to step-1");
	ckpt_close(&c);
	like(warn, "step-2: model.safetensors: 100 bytes", "... warning about step-2");
	like(warn, "(truncated?); skipped", "... that it was skipped");

	/* one byte flipped */
	put(root, 3, 100, &err);
	snprintf(p, sizeof(p), "%s/step-3/optim.bin", root);
	if ((f = fopen(p, "r+"))) {
		fseek(f, 77, SEEK_SET);
		fputc(optim[77] ^ 0x10, f);
		fclose(f);
	}
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "flipped byte: find_latest falls back");
	is_int(c.step, 1, "... to step-1");
	ckpt_close(&c);
	like(warn, "step-3: optim.bin: crc32 mismatch (corrupt)", "... naming step-3's file");

	/* missing file */
	put(root, 4, 100, &err);
	snprintf(p, sizeof(p), "%s/step-4/optim.bin", root);
	unlink(p);
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "missing file: find_latest falls back");
	is_int(c.step, 1, "... to step-1");
	ckpt_close(&c);
	like(warn, "step-4: optim.bin: missing", "... naming step-4's file");

	/* garbage state.json */
	put(root, 5, 100, &err);
	snprintf(p, sizeof(p), "%s/step-5/state.json", root);
	write_text(p, "{garbage");
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "garbage state.json: find_latest falls back");
	is_int(c.step, 1, "... to step-1");
	ckpt_close(&c);
	like(warn, "step-5: state.json: invalid JSON at line 1", "... naming step-5's state.json");

	/* an interrupted write */
	snprintf(p, sizeof(p), "%s/step-6.tmp-123-abcdef", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/step-6.tmp-123-abcdef/model.safetensors", root);
	write_text(p, "half");
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "leftover temporary: find_latest falls back");
	is_int(c.step, 1, "... to step-1");
	ckpt_close(&c);
	like(warn, "step-6.tmp-123-abcdef: left by an interrupted checkpoint write; skipped",
	     "... naming the temporary");

	/* a step directory without state.json */
	snprintf(p, sizeof(p), "%s/step-7", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/step-7/model.safetensors", root);
	write_text(p, "x");
	/* and things that are not ours, which are ignored */
	snprintf(p, sizeof(p), "%s/notes.txt", root);
	write_text(p, "mine");
	snprintf(p, sizeof(p), "%s/step-99x", root);
	mkdir(p, 0755);
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "no state.json: find_latest falls back");
	is_int(c.step, 1, "... to step-1");
	ckpt_close(&c);
	like(warn, "step-7: state.json: missing", "... naming step-7");
	{
		/* each later write pruned what cannot be resumed from by size alone: step-2
		 * (truncated) and step-4 (file missing); step-3's damage needs the CRC to see */
		int lines = 1;
		for (const char *s = warn; *s; s++)
			lines += *s == '\n';
		if (!is_int(lines, 4, "one warning line per damaged step left (7, 6.tmp, 5, 3)"))
			diag("%s", warn);
		ok(strstr(warn, "step-7") && strstr(warn, "step-3") &&
		       strstr(warn, "step-7") < strstr(warn, "step-3"),
		   "... newest first");
		ok(!strstr(warn, "step-99x") && !strstr(warn, "notes.txt"), "... others ignored");
		snprintf(p, sizeof(p), "%s/step-2", root);
		ok(!exists(p), "the truncated step-2 was pruned by the next write");
		snprintf(p, sizeof(p), "%s/step-4", root);
		ok(!exists(p), "... and step-4 with its file missing");
	}

	/* a truncated warning buffer stays a string */
	char tiny[16];
	is_int(ckpt_find_latest(root, NULL, NULL, &c, tiny, sizeof(tiny), &err), 1,
	       "a small warning buffer");
	ok(strlen(tiny) < sizeof(tiny), "... is truncated, NUL-terminated");
	ckpt_close(&c);

	/* the next write clears what cannot be resumed from */
	is_int(put(root, 8, 100, &err), 0, "write step-8 after the damage");
	snprintf(p, sizeof(p), "%s/step-6.tmp-123-abcdef", root);
	ok(!exists(p), "... removes the leftover temporary");
	snprintf(p, sizeof(p), "%s/step-7", root);
	ok(!exists(p), "... and the step without state.json");
	snprintf(p, sizeof(p), "%s/notes.txt", root);
	ok(exists(p), "... but not a file that is not ours");
	snprintf(p, sizeof(p), "%s/step-99x", root);
	ok(exists(p), "... nor a directory that is not ours");
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "find_latest after step-8");
	is_int(c.step, 8, "... takes step-8");
	ckpt_close(&c);
}

/* The caller's check of the state: here, "step_seen" must be below a limit. */
static int below(void *ctx, const char *state_json, struct dp_error *why)
{
	long limit = *(const long *)ctx, seen = -1;
	const char *p = strstr(state_json, "\"step_seen\":");
	if (p)
		seen = strtol(p + strlen("\"step_seen\":"), NULL, 10);
	if (seen >= 0 && seen < limit)
		return 0;
	errprintf(why, "step_seen %ld is not below %ld", seen, limit);
	return -1;
}

static void test_state(void)
{
	char root[256], p[512], warn[4096];
	struct dp_error err;
	struct ckpt c;
	FILE *f;
	long limit = 3;

	path_of(root, sizeof(root), base, "state");
	is_int(put(root, 1, 100, &err), 0, "state: step-1");
	snprintf(p, sizeof(p), "%s/step-1/trainer_state.json", root);
	ok(exists(p), "the caller's state is a file of its own");
	snprintf(p, sizeof(p), "%s/step-1/state.json", root);
	size_t len;
	char *text = slurp(p, &len);
	ok(text && strstr(text, "\"trainer_state.json\"") && strstr(text, "\"crc32\"") &&
	       !strstr(text, "step_seen"),
	   "state.json lists it with its size and CRC, and holds no state itself");
	free(text);

	/* one digit of the state changed: the CRC sees it */
	put(root, 2, 100, &err);
	snprintf(p, sizeof(p), "%s/step-2/trainer_state.json", root);
	text = slurp(p, &len);
	char *d = text ? strstr(text, "2") : NULL;
	if (d && (f = fopen(p, "r+"))) {
		fseek(f, d - text, SEEK_SET);
		fputc('7', f);
		fclose(f);
	}
	free(text);
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "an edited trainer_state.json: find_latest falls back");
	is_int(c.step, 1, "... to step-1");
	ckpt_close(&c);
	like(warn, "step-2: trainer_state.json: crc32 mismatch (corrupt)", "... naming it");

	/* a state the caller refuses */
	put(root, 3, 100, &err);
	is_int(ckpt_find_latest(root, below, &limit, &c, warn, sizeof(warn), &err), 1,
	       "a state the caller's check refuses: find_latest falls back");
	is_int(c.step, 1, "... to step-1");
	ok(c.state_json && strstr(c.state_json, "\"step_seen\":1"), "... with its state: %s",
	   c.state_json ? c.state_json : "(null)");
	ckpt_close(&c);
	like(warn, "step-3: trainer_state.json: step_seen 3 is not below 3; skipped",
	     "... saying why");
	limit = 10;
	is_int(ckpt_find_latest(root, below, &limit, &c, warn, sizeof(warn), &err), 1,
	       "the check accepting it");
	is_int(c.step, 3, "... takes step-3");
	ckpt_close(&c);

	/* a version-1 checkpoint (the state inside state.json, unchecked) is still read */
	snprintf(p, sizeof(p), "%s/step-4", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/step-4/state.json", root);
	write_text(p, "{\"format\": \"dptrain-checkpoint\", \"version\": 1, \"step\": 4, "
		      "\"files\": {}, \"state\": {\"step_seen\": 4}}");
	is_int(ckpt_find_latest(root, below, &limit, &c, warn, sizeof(warn), &err), 1,
	       "a version-1 checkpoint");
	is_int(c.step, 4, "... is read");
	ok(c.state_json && strstr(c.state_json, "\"step_seen\":4"), "... with its state: %s",
	   c.state_json ? c.state_json : "(null)");
	ckpt_close(&c);
	write_text(p, "{\"format\": \"dptrain-checkpoint\", \"version\": 3, \"step\": 4, "
		      "\"files\": {}}");
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "a version from the future");
	is_int(c.step, 3, "... is skipped");
	ckpt_close(&c);
	like(warn, "step-4: state.json: \"version\" is not 1 to 2", "... saying why");

	struct ckpt_file bad[1] = {{"trainer_state.json", write_blob, &bmodel}};
	is_int(ckpt_write(root, 9, bad, 1, "{}", 100, &err), -1,
	       "a caller's file may not be called trainer_state.json");
}

static void test_none_valid(void)
{
	char root[256], p[512], warn[1024];
	struct dp_error err;
	struct ckpt c;

	path_of(root, sizeof(root), base, "none");
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 0,
	       "root missing: nothing to resume from");
	put(root, 1, 3, &err);
	snprintf(p, sizeof(p), "%s/step-1/model.safetensors", root);
	ok(truncate(p, 0) == 0, "truncate step-1/model.safetensors to 0");
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 0,
	       "only a damaged step: 0");
	like(warn, "step-1: model.safetensors: 0 bytes", "... with a warning about it");
	is(c.state_json ? "set" : "NULL", "NULL", "... c left empty");
	if (geteuid() != 0) {
		snprintf(p, sizeof(p), "%s/unreadable", base);
		mkdir(p, 0);
		is_int(ckpt_find_latest(p, NULL, NULL, &c, warn, sizeof(warn), &err), -1,
		       "an unreadable root is an error");
		like(err.text, "Permission denied", "... saying why: %s", err.text);
		chmod(p, 0755);
	} else {
		skip(2, "running as root: permissions do not stop us");
	}
}

static void test_writer_fails(void)
{
	char root[256], p[512], warn[1024], list[256];
	struct dp_error err;
	struct ckpt c;
	size_t len;
	char *text;
	struct blob half = {optim, sizeof(optim), 1};
	struct ckpt_file f[2] = {{"model.safetensors", write_blob, &bmodel},
				 {"optim.bin", write_blob, &half}};

	path_of(root, sizeof(root), base, "fail");
	is_int(put(root, 1, 3, &err), 0, "writer failure: a valid step-1 first");
	is_int(ckpt_write(root, 2, f, 2, "{}", 3, &err), -1,
	       "a writer failing midway fails the write");
	like(err.text, "optim.bin: simulated failure", "... with the writer's message: %s",
	     err.text);
	snprintf(p, sizeof(p), "%s/step-2", root);
	ok(!exists(p), "... no step-2");
	is_int(count_names(root, ".tmp-", list, sizeof(list)), 0, "... no temporary left: %s",
	       list);
	snprintf(p, sizeof(p), "%s/latest", root);
	text = slurp(p, &len);
	is(text ? text : "(none)", "step-1\n", "... latest unchanged");
	free(text);
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "... step-1 still found");
	is_int(c.step, 1, "... as the newest");
	is(warn, "", "... without warnings");
	ckpt_close(&c);
}

static void test_rewrite(void)
{
	char root[256], p[512], list[256];
	struct dp_error err;
	struct ckpt c;
	unsigned char other[300];
	struct blob b = {other, sizeof(other), 0};
	struct ckpt_file f[1] = {{"model.safetensors", write_blob, &b}};

	memset(other, 0x5a, sizeof(other));
	path_of(root, sizeof(root), base, "rewrite");
	is_int(put(root, 3, 3, &err), 0, "rewrite: step-3 once");
	is_int(ckpt_write(root, 3, f, 1, "{\"again\":true}", 3, &err), 0,
	       "step-3 again with other files");
	snprintf(p, sizeof(p), "%s/step-3", root);
	if (!is_int(ckpt_open(&c, p, &err), 0, "... is valid"))
		diag("%s", err.text);
	is(c.state_json ? c.state_json : "", "{\"again\":true}", "... with the new state");
	ckpt_close(&c);
	snprintf(p, sizeof(p), "%s/step-3/model.safetensors", root);
	ok(same_file(p, other, sizeof(other)), "... and the new file");
	snprintf(p, sizeof(p), "%s/step-3/optim.bin", root);
	ok(!exists(p), "... and none of the old");
	is_int(count_names(root, "", list, sizeof(list)), 2, "... nothing else left: %s", list);
}

static void test_full_disk(void)
{
	char mnt[256], root[512], p[600], warn[1024], list[256];
	struct dp_error err;
	struct ckpt c;
	static unsigned char big[1 << 20];
	struct blob b = {big, sizeof(big), 0};
	struct ckpt_file f[1] = {{"model.safetensors", write_blob, &b}};
	const int n = 9;

	if (geteuid() != 0) {
		skip(n, "full disk: needs root to mount a small tmpfs");
		return;
	}
	path_of(mnt, sizeof(mnt), base, "small");
	mkdir(mnt, 0755);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=256k") < 0) {
		skip(n, "full disk: cannot mount a tmpfs on %s: %s", mnt, strerror(errno));
		return;
	}
	path_of(root, sizeof(root), mnt, "checkpoints");
	is_int(put(root, 1, 3, &err), 0, "full disk: a small step-1 fits");
	is_int(ckpt_write(root, 2, f, 1, "{}", 3, &err), -1,
	       "a 1 MiB file on a 256 KiB disk fails");
	like(err.text, "disk is full", "... saying the disk is full: %s", err.text);
	like(err.text, "model.safetensors", "... naming the file");
	snprintf(p, sizeof(p), "%s/step-2", root);
	ok(!exists(p), "... no step-2");
	is_int(count_names(root, ".tmp-", list, sizeof(list)), 0, "... no temporary left: %s",
	       list);
	is_int(ckpt_find_latest(root, NULL, NULL, &c, warn, sizeof(warn), &err), 1,
	       "... step-1 still found");
	is_int(c.step, 1, "... as the newest");
	is(warn, "", "... without warnings");
	ckpt_close(&c);
	if (umount2(mnt, MNT_DETACH) < 0)
		diag("umount %s: %s", mnt, strerror(errno));
}

int main(void)
{
	for (size_t i = 0; i < sizeof(model); i++)
		model[i] = (unsigned char)(i * 7 + 3);
	for (size_t i = 0; i < sizeof(optim); i++)
		optim[i] = (unsigned char)(i * 13 + 1);
	snprintf(base, sizeof(base), "/tmp/dptrain-ckpt-XXXXXX");
	if (!mkdtemp(base))
		bail_out("mkdtemp: %s", strerror(errno));

	test_round_trip();
	test_prune();
	test_damage();
	test_state();
	test_none_valid();
	test_writer_fails();
	test_rewrite();
	test_full_disk();

	rm_rf(base);
	return done_testing();
}
