/* metrics.c (test) — trainer/metrics.c and the metrics.jsonl the trainer writes through it: one
 * JSON object per line that jansson reads, each line in the file as soon as it is written,
 * appended across a reopen and across a resumed run, the keys and types of the start, train,
 * eval and end events of a real (tiny, CPU) run, float32 values that read back to the same
 * float; an unopenable file or no descriptor left named in the error; a file that stops
 * growing (a full disk: RLIMIT_FSIZE, in a child) keeps every line before. Everything happens
 * under a mkdtemp directory in /tmp, removed at the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "config/config.h"
#include "trainer/metrics.h"
#include "trainer/train.h"
#include "t/lib/tap.h"

static char tmp[] = "/tmp/dptrain-metrics-XXXXXX";

/* Takes the ,"time":T each line ends with out of text (in place); how many there were, -1 when
 * one is not a time between lo and hi. */
static int strip_time(char *text, double lo, double hi)
{
	int n = 0;
	char *p;
	while (text && (p = strstr(text, ",\"time\":"))) {
		char *end;
		double t = strtod(p + 8, &end);
		if (t < lo || t > hi || strncmp(end, "}\n", 2) != 0)
			return -1;
		memmove(p, end, strlen(end) + 1);
		n++;
	}
	return n;
}

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0, got;
	if (!f)
		return NULL;
	do {
		if (n + 4096 + 1 > cap) {
			char *g = realloc(buf, cap = cap * 2 + 8192);
			if (!g) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = g;
		}
		got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
	} while (got > 0);
	fclose(f);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

/* The lines of text (each ending in '\n'; a last one without is counted in *partial). */
static int split_lines(char *text, char **line, int max, size_t *partial)
{
	int n = 0;
	char *p = text, *nl;
	while ((nl = strchr(p, '\n')) && n < max) {
		*nl = '\0';
		line[n++] = p;
		p = nl + 1;
	}
	*partial = strlen(p);
	return n;
}

/* Every line a JSON object (no duplicate keys); NULL where one is not, with why. */
static json_t *parse_line(const char *line, char *why, size_t len)
{
	json_error_t je;
	json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &je);
	if (!o)
		snprintf(why, len, "%s (line \"%.80s\")", je.text, line);
	else if (!json_is_object(o)) {
		snprintf(why, len, "not an object: \"%.80s\"", line);
		json_decref(o);
		o = NULL;
	}
	return o;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* ---------------------------------------------------------------------------------------
 * metrics.h itself. */

static void test_lines(void)
{
	char dir[256], path[300], *text;
	struct metrics mt = {0};
	struct dp_error err = {0};
	size_t len, partial;
	char *line[16];

	snprintf(dir, sizeof(dir), "%s/plain", tmp);
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
	ok(metrics_open(&mt, dir, &err) == 0 && mt.open, "metrics_open on a directory: %s",
	   err.text);
	text = slurp(path, &len);
	ok(text && len == 0, "it creates an empty dir/metrics.jsonl");
	free(text);

	double t0 = wall_now() - 0.001;
	metrics_line(&mt, "{\"event\":\"start\",\"n\":%d,\"name\":\"%s\"}", 3, "mlp");
	text = slurp(path, &len);
	is_int(strip_time(text, t0, wall_now() + 0.001), 1,
	       "the line ends with the wall-clock time it was written");
	is(text, "{\"event\":\"start\",\"n\":3,\"name\":\"mlp\"}\n",
	   "a line is in the file as soon as it is written (the file still open)");
	free(text);
	metrics_line(&mt, "{\"x\":%.9g}", (double)0.1f);
	metrics_line(&mt, "{\"y\":%ld}", -7L);
	metrics_close(&mt);
	ok(!mt.open, "metrics_close: no file");
	metrics_close(&mt);
	pass("metrics_close twice is harmless");

	ok(metrics_open(&mt, dir, &err) == 0, "reopened (a resumed run)");
	metrics_line(&mt, "{\"event\":\"start\",\"n\":%d}", 4);
	metrics_close(&mt);
	text = slurp(path, &len);
	is_int(strip_time(text, t0, wall_now() + 0.001), 4, "every line has its time");
	is(text,
	   "{\"event\":\"start\",\"n\":3,\"name\":\"mlp\"}\n{\"x\":0.100000001}\n{\"y\":-7}\n"
	   "{\"event\":\"start\",\"n\":4}\n",
	   "the reopened file is appended to: every earlier line intact, one object per line");
	int n = split_lines(text, line, 16, &partial), objects = 0;
	char why[256] = "";
	for (int i = 0; i < n; i++) {
		json_t *o = parse_line(line[i], why, sizeof(why));
		objects += o != NULL;
		json_decref(o);
	}
	ok(n == 4 && objects == 4 && partial == 0, "jansson reads 4 objects from 4 lines %s", why);
	free(text);

	/* strings into JSON */
	char js[16];
	ok(metrics_json_str(js, sizeof(js), "a\"b\\c\n\x01") == js,
	   "metrics_json_str returns its buffer");
	is(js, "a\\\"b\\\\c\\u000a", "quotes, backslashes, control characters escaped; cut whole");
	is(metrics_json_str(js, sizeof(js), NULL), "", "NULL is \"\"");
	is(metrics_json_str(js, sizeof(js), "/déjà vu"), "/déjà vu", "UTF-8 as it is");

	/* other ranks and output.metrics false: a struct metrics that was never opened */
	struct metrics none = {0};
	metrics_line(&none, "{\"event\":\"%s\"}", "nowhere");
	metrics_close(&none);
	pass("without a file, metrics_line and metrics_close do nothing");
}

static void test_open_fails(void)
{
	char dir[256], want[400];
	struct metrics mt = {.open = 1}; /* a failed open must clear it */
	struct dp_error err = {0};
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/missing", tmp);
	ok(metrics_open(&mt, dir, &err) == -1 && !mt.open, "a missing directory: -1, no file");
	snprintf(want, sizeof(want), "%s/metrics.jsonl: cannot open: %s", dir, strerror(ENOENT));
	is(err.text, want, "the error names the file and why");

	snprintf(dir, sizeof(dir), "%s/a-file", tmp);
	f = fopen(dir, "w");
	if (f)
		fclose(f);
	ok(metrics_open(&mt, dir, &err) == -1, "output directory that is a file: -1");
	snprintf(want, sizeof(want), "%s/metrics.jsonl: cannot open: %s", dir, strerror(ENOTDIR));
	is(err.text, want, "named likewise");

	/* no descriptor left (RLIMIT_NOFILE 0 for a moment) */
	struct rlimit old, none;
	snprintf(dir, sizeof(dir), "%s/plain", tmp);
	if (getrlimit(RLIMIT_NOFILE, &old) == 0) {
		none = old;
		none.rlim_cur = 0;
		int set = setrlimit(RLIMIT_NOFILE, &none) == 0;
		int rv = metrics_open(&mt, dir, &err);
		setrlimit(RLIMIT_NOFILE, &old);
		snprintf(want, sizeof(want), "%s/metrics.jsonl: cannot open: %s", dir,
			 strerror(EMFILE));
		ok(set && rv == -1 && !mt.open, "no descriptor left: -1");
		is(err.text, want, "named likewise");
	} else {
		skip(2, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
	}
}

/* A file that can grow no more (the disk full, a quota): RLIMIT_FSIZE in a child, so that the
 * write crossing the limit is cut (as ENOSPC cuts it) and the next fails. Every line before
 * stays whole and readable, the cut line is taken back (no half line), and the writer says so
 * once on stderr, naming the file. */
static void test_full(void)
{
	char dir[256], path[300], errpath[300], *text, *line[64];
	const long limit = 500; /* 6 of the lines below, and part of one */
	size_t len, partial;
	int status = -1;

	snprintf(dir, sizeof(dir), "%s/full", tmp);
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
	snprintf(errpath, sizeof(errpath), "%s/stderr", tmp);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int efd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (efd < 0 || dup2(efd, 2) < 0)
			_exit(3);
		struct metrics mt;
		struct dp_error err;
		struct rlimit rl = {(rlim_t)limit, (rlim_t)limit};
		signal(SIGXFSZ, SIG_IGN);
		if (setrlimit(RLIMIT_FSIZE, &rl) < 0 || metrics_open(&mt, dir, &err) < 0)
			_exit(2);
		for (int i = 0; i < 20; i++)
			metrics_line(&mt, "{\"event\":\"train\",\"global_step\":%d,\"loss\":%.9g}",
				     i + 1, 2.5 / (i + 1));
		metrics_close(&mt);
		_exit(0);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "writing past the limit neither crashes nor stops the writer (status %d)", status);
	text = slurp(path, &len);
	int timed = strip_time(text, 0, 1e12);
	ok(text && len <= (size_t)limit && len > 0 && text[len - 1] == '\n',
	   "the file stopped at a line's end within the limit (%zu bytes)", len);
	if (!text)
		return;
	int n = split_lines(text, line, 64, &partial), good = 1;
	for (int i = 0; i < n; i++) {
		char want[128], why[256];
		snprintf(want, sizeof(want),
			 "{\"event\":\"train\",\"global_step\":%d,\"loss\":%.9g}", i + 1,
			 2.5 / (i + 1));
		json_t *o = parse_line(line[i], why, sizeof(why));
		if (!o || strcmp(line[i], want) != 0)
			good = 0;
		json_decref(o);
	}
	ok(n >= 5 && good && timed == n, "the %d lines before are whole, in order, and read back",
	   n);
	ok(partial == 0, "no half line at the end (%zu bytes of one)", partial);
	free(text);
	size_t elen;
	char *e = slurp(errpath, &elen), want[400];
	snprintf(want, sizeof(want), "dptrain: warning: %s: cannot write a line (", path);
	int said = 0;
	for (const char *q = e; q && (q = strstr(q, "cannot write a line")); q++)
		said++;
	ok(e && strstr(e, want) && strstr(e, "training goes on") && said == 1,
	   "the failure is said once, naming the file: %s", e ? e : "(nothing)");
	free(e);
}

/* ---------------------------------------------------------------------------------------
 * The trainer's lines: a real run of a tiny MLP on synthetic data, then its resumption. */

enum kind { INT, NUM, STR, ARR }; /* NUM: %g prints 1 as an integer; jansson reads either */

struct key {
	const char *name;
	enum kind kind;
};

static const struct key start_keys[] = {{"event", STR},
					{"model", STR},
					{"parameters", INT},
					{"world_size", INT},
					{"steps_per_epoch", INT},
					{"total_steps", INT},
					{"schema", INT},
					{"resumed_from_step", INT},
					{"job", STR},
					{"restart_count", INT},
					{"output_dir", STR},
					{"hosts", INT},
					{"backend", STR},
					{"batch_size", INT},
					{"log_every", INT},
					{"time", NUM}};
static const struct key train_keys[] = {
    {"event", STR},	{"epoch", INT},	       {"step", INT},	      {"global_step", INT},
    {"loss", NUM},	{"mean_loss", NUM},    {"rank0_loss", NUM},   {"lr", NUM},
    {"img_per_s", NUM}, {"comm_wait_ms", NUM}, {"data_wait_ms", NUM}, {"loss_scale", NUM},
    {"step_ms", NUM},	{"compute_ms", NUM},   {"eta_s", NUM},	      {"time", NUM}};
static const struct key eval_keys[] = {{"event", STR},	  {"epoch", INT}, {"global_step", INT},
				       {"accuracy", NUM}, {"loss", NUM},  {"correct", INT},
				       {"count", INT},	  {"time", NUM}};
static const struct key end_keys[] = {
    {"event", STR},	    {"steps", INT},	    {"epochs", INT},
    {"seconds", NUM},	    {"eval_accuracy", NUM}, {"peak_device_mib", NUM},
    {"skipped_steps", INT}, {"loss_scale", NUM},    {"time", NUM}};
static const struct key ranks_keys[] = {
    {"event", STR}, {"global_step", INT}, {"ranks", ARR}, {"time", NUM}};
static const struct key rank_keys[] = {
    {"rank", INT},	   {"node", STR},	{"gpu", INT},
    {"step_ms", NUM},	   {"compute_ms", NUM}, {"data_wait_ms", NUM},
    {"comm_wait_ms", NUM}, {"img_per_s", NUM},	{"device_mib", NUM}};
static const struct key checkpoint_keys[] = {
    {"event", STR}, {"global_step", INT}, {"path", STR}, {"time", NUM}};

#define NKEYS(a) ((int)(sizeof(a) / sizeof(*(a))))

/* o has exactly these keys with these types; else why says which. */
static int has_schema(json_t *o, const struct key *k, int n, char *why, size_t len)
{
	if ((int)json_object_size(o) != n) {
		snprintf(why, len, "%zu keys, not %d", json_object_size(o), n);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		json_t *v = json_object_get(o, k[i].name);
		int good = k[i].kind == INT   ? json_is_integer(v)
			   : k[i].kind == NUM ? json_is_number(v) && isfinite(json_number_value(v))
			   : k[i].kind == ARR ? json_is_array(v)
					      : json_is_string(v);
		if (!good) {
			snprintf(why, len, "\"%s\" %s", k[i].name,
				 v ? "has another type" : "is missing");
			return 0;
		}
	}
	return 1;
}

static long iget(json_t *o, const char *k)
{
	return (long)json_integer_value(json_object_get(o, k));
}

static double nget(json_t *o, const char *k)
{
	return json_number_value(json_object_get(o, k));
}

struct run_lines {
	json_t *o[64];
	int n;
	int bad_json, bad_schema;
	char why[256];
	int train, eval, start, end, ranks, checkpoint;
	int last_train, last_eval, last_end; /* their index in o */
	long first_step, last_step;	     /* global_step of the train events */
	int steps_consecutive;
};

/* Reads and checks every line of text; fills r. */
static void read_run(const char *text, struct run_lines *r)
{
	char *line[64], *copy = strdup(text);
	size_t partial;
	if (!copy)
		bail_out("out of memory");
	int n = split_lines(copy, line, 64, &partial);
	memset(r, 0, sizeof(*r));
	r->steps_consecutive = 1;
	r->first_step = -1;
	if (partial)
		r->bad_json++;
	for (int i = 0; i < n; i++) {
		json_t *o = parse_line(line[i], r->why, sizeof(r->why));
		if (!o) {
			r->bad_json++;
			continue;
		}
		r->o[r->n++] = o;
		const char *ev = json_string_value(json_object_get(o, "event"));
		int good = 0;
		char why[200] = "no event";
		if (ev && !strcmp(ev, "start")) {
			good = has_schema(o, start_keys, NKEYS(start_keys), why, sizeof(why));
			r->start++;
		} else if (ev && !strcmp(ev, "train")) {
			good = has_schema(o, train_keys, NKEYS(train_keys), why, sizeof(why));
			long s = iget(o, "global_step");
			if (r->first_step < 0)
				r->first_step = s;
			else if (s != r->last_step + 1)
				r->steps_consecutive = 0;
			r->last_step = s;
			r->train++;
		} else if (ev && !strcmp(ev, "eval")) {
			good = has_schema(o, eval_keys, NKEYS(eval_keys), why, sizeof(why));
			r->eval++;
		} else if (ev && !strcmp(ev, "end")) {
			good = has_schema(o, end_keys, NKEYS(end_keys), why, sizeof(why));
			r->end++;
		} else if (ev && !strcmp(ev, "ranks")) {
			/* one rank here: itself, rank 0 on this host, no GPU; its step is the sum
			 * of its parts */
			good = has_schema(o, ranks_keys, NKEYS(ranks_keys), why, sizeof(why));
			json_t *a = json_object_get(o, "ranks"), *x = json_array_get(a, 0);
			if (good &&
			    (json_array_size(a) != 1 ||
			     !has_schema(x, rank_keys, NKEYS(rank_keys), why, sizeof(why)) ||
			     iget(x, "rank") != 0 || iget(x, "gpu") != -1 ||
			     fabs(nget(x, "compute_ms") + nget(x, "data_wait_ms") +
				  nget(x, "comm_wait_ms") - nget(x, "step_ms")) >
				 1e-3 + 1e-3 * nget(x, "step_ms") ||
			     iget(o, "global_step") != r->last_step)) {
				good = 0;
				if (!why[0] || !strcmp(why, "no event"))
					snprintf(why, sizeof(why), "a rank's figures are wrong");
			}
			r->ranks++;
		} else if (ev && !strcmp(ev, "checkpoint")) {
			good = has_schema(o, checkpoint_keys, NKEYS(checkpoint_keys), why,
					  sizeof(why));
			r->checkpoint++;
		}
		if (ev && !strcmp(ev, "train"))
			r->last_train = r->n - 1;
		if (ev && !strcmp(ev, "eval"))
			r->last_eval = r->n - 1;
		if (ev && !strcmp(ev, "end"))
			r->last_end = r->n - 1;
		if (!good && !r->bad_schema++)
			snprintf(r->why, sizeof(r->why), "line %d (%s): %s", i + 1, ev ? ev : "?",
				 why);
	}
	free(copy);
}

static void free_run(struct run_lines *r)
{
	for (int i = 0; i < r->n; i++)
		json_decref(r->o[i]);
}

static int train(const char *dir, int epochs, struct train_result *res, struct dp_error *err)
{
	char json[1024], log[300];
	struct cfg c;
	snprintf(json, sizeof(json),
		 "{\"seed\": 5, \"model\": {\"name\": \"mlp\", \"num_classes\": 4, "
		 "\"input_shape\": [1, 6, 6], \"hidden\": [8]}, "
		 "\"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 64}, "
		 "\"eval\": {\"size\": 24}, \"batch_size\": 8, \"workers\": 0}, "
		 "\"optimizer\": {\"name\": \"adamw\", \"lr\": 0.01}, "
		 "\"train\": {\"epochs\": %d, \"log_every\": 1, \"threads\": 1}, "
		 "\"device\": {\"kind\": \"cpu\"}, \"output\": {\"metrics\": true}}",
		 epochs);
	if (cfg_parse(&c, json, strlen(json), "metrics-test.json", 0, NULL, err) < 0)
		return -1;
	snprintf(log, sizeof(log), "%s/train.log", dir);
	FILE *out = fopen(log, "a");
	struct train_env env = {
	    .rank = 0, .world_size = 1, .threads = 1, .gpu = -1, .output_dir = dir, .out = out};
	int rv = out ? train_run(&c, &env, res, err) : errprintf(err, "%s: cannot open", log);
	if (out)
		fclose(out);
	cfg_free(&c);
	return rv;
}

static void test_trainer(void)
{
	char dir[256], path[300], *first, *both;
	struct train_result res;
	struct dp_error err = {0};
	struct run_lines r;
	size_t len1, len2;

	snprintf(dir, sizeof(dir), "%s/run", tmp);
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
	if (!ok(train(dir, 1, &res, &err) == 0, "a run of 1 epoch: %s", err.text)) {
		skip(16, "no run");
		return;
	}
	first = slurp(path, &len1);
	if (!first)
		bail_out("%s: %s", path, strerror(errno));
	read_run(first, &r);
	ok(r.bad_json == 0, "every line of metrics.jsonl is one JSON object %s", r.why);
	ok(r.bad_schema == 0, "start, train, eval and end events have their keys and types %s",
	   r.why);
	ok(r.n >= 3 && r.start == 1 &&
	       !strcmp(json_string_value(json_object_get(r.o[0], "event")), "start") &&
	       r.end == 1 &&
	       !strcmp(json_string_value(json_object_get(r.o[r.n - 1], "event")), "end"),
	   "it starts with the start event and ends with the end event");
	ok(r.train == 8 && r.first_step == 1 && r.last_step == 8 && r.steps_consecutive &&
	       iget(r.o[0], "total_steps") == 8 && iget(r.o[0], "steps_per_epoch") == 8,
	   "a train event per step (log_every 1): global_step 1 to 8 (%d events)", r.train);
	ok(r.eval == 1 && iget(r.o[r.last_eval], "count") == 24,
	   "one eval event, of the 24 samples");
	ok(r.ranks == 8 && r.checkpoint == 1,
	   "a ranks event with each train event, a checkpoint event (%d, %d)", r.ranks,
	   r.checkpoint);
	/* the last train event's loss is this rank's step loss, a float32: %.9g brings back the
	 * same float */
	json_t *last = r.o[r.last_train], *ev = r.o[r.last_eval], *end = r.o[r.last_end];
	ok((float)nget(last, "rank0_loss") == (float)res.last_loss &&
	       (float)nget(last, "loss") == (float)res.last_loss && res.last_loss > 0,
	   "the loss reads back as the float the run ended with (%.9g)", res.last_loss);
	ok((float)nget(ev, "accuracy") == (float)res.eval_accuracy &&
	       (float)nget(end, "eval_accuracy") == (float)res.eval_accuracy,
	   "the accuracy reads back as the run's (%g)", res.eval_accuracy);
	ok(iget(end, "steps") == res.steps && iget(end, "epochs") == 1 &&
	       iget(end, "skipped_steps") == 0 && nget(end, "loss_scale") == 1,
	   "the end event: 8 steps, 1 epoch, no step skipped, loss scale 1");
	free_run(&r);

	/* the same job with 2 epochs resumes from the first one's checkpoint and appends */
	if (!ok(train(dir, 2, &res, &err) == 0 && res.resumed_at == 8,
		"the job with 2 epochs resumes at step 8 (%ld): %s", res.resumed_at, err.text)) {
		skip(6, "no resumed run");
		free(first);
		return;
	}
	both = slurp(path, &len2);
	if (!both)
		bail_out("%s: %s", path, strerror(errno));
	ok(len2 > len1 && memcmp(both, first, len1) == 0,
	   "the resumed run appends: the first run's %zu bytes are as they were", len1);
	read_run(both + len1, &r);
	ok(r.bad_json == 0 && r.bad_schema == 0, "its lines are objects with the same schema %s",
	   r.why);
	ok(r.start == 1 && r.end == 1 && r.n >= 3 &&
	       !strcmp(json_string_value(json_object_get(r.o[0], "event")), "start") &&
	       iget(r.o[0], "total_steps") == 16,
	   "its own start event (16 steps in all) and end event");
	ok(r.train == 8 && r.first_step == 9 && r.last_step == 16 && r.steps_consecutive,
	   "its train events go on from global_step 9 to 16");
	ok(r.n >= 1 && iget(r.o[r.n - 1], "steps") == 16 && iget(r.o[r.n - 1], "epochs") == 2,
	   "its end event counts 16 steps, 2 epochs");
	free_run(&r);
	read_run(both, &r);
	ok(r.bad_json == 0 && r.start == 2 && r.end == 2 && r.train == 16,
	   "the whole file: 2 runs, 16 train events, every line an object");
	free_run(&r);
	free(both);
	free(first);
}

int main(void)
{
	if (!mkdtemp(tmp))
		bail_out("mkdtemp: %s", strerror(errno));
	test_lines();
	test_open_fails();
	test_full();
	test_trainer();
	nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return done_testing();
}
