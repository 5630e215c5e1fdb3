/* report.c — report.html from an output directory: metrics.jsonl read line by line (each line
 * an event; bad ones skipped and said), thinned to what a page can draw (every k-th point,
 * the last always), then one page: the summary, tables and config as escaped HTML, the curves'
 * data as JSON that the inline script draws as SVG (report_page.c). */
#define _GNU_SOURCE /* asprintf */
#include "trainer/report.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/openfile.h"
#include "common/warn.h"
#include "ranktable/ranktable.h"
#include "trainer/report_page.h"

#ifndef DPTRAIN_VERSION
#define DPTRAIN_VERSION "unknown"
#endif

/* What a page holds at most: points per curve, heat-map columns and rows, rows of tables,
 * problems listed; beyond them every k-th is kept (the last always), or the rest counted. */
#define MAX_POINTS   4000
#define MAX_COLUMNS  200
#define MAX_ROWS     256
#define MAX_LISTED   500
#define MAX_PROBLEMS 50
#define MAX_RUNS     1000
#define MAX_LABELS   64	       /* ranks named on the heat map's rows */
#define MAX_CONFIG   (1 << 20) /* bytes of config shown */

/* ---- a growing text buffer; out of memory once: every later put is dropped ---- */
struct buf {
	char *p;
	size_t n, cap;
	int oom;
};

static void bput(struct buf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void bputs(struct buf *b, const char *s)
{
	bput(b, s, strlen(s));
}

static void bprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	char small[256];
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof(small)) {
		bput(b, small, (size_t)n);
		return;
	}
	char *big = malloc((size_t)n + 1);
	if (!big) {
		b->oom = 1;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	bput(b, big, (size_t)n);
	free(big);
}

/* s as HTML text or attribute value */
static void bhtml(struct buf *b, const char *s)
{
	if (!s)
		return;
	for (const char *p = s; *p; p++) {
		switch (*p) {
		case '&':
			bputs(b, "&amp;");
			break;
		case '<':
			bputs(b, "&lt;");
			break;
		case '>':
			bputs(b, "&gt;");
			break;
		case '"':
			bputs(b, "&quot;");
			break;
		case '\'':
			bputs(b, "&#39;");
			break;
		default:
			bput(b, p, 1);
		}
	}
}

char *report_html_escape(const char *s)
{
	struct buf b = {0};
	bputs(&b, "");
	bhtml(&b, s);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

char *report_json_for_script(const char *json)
{
	struct buf b = {0};
	bputs(&b, "");
	for (const unsigned char *p = (const unsigned char *)json; *p; p++) {
		if (*p == '<')
			bputs(&b, "\\u003c");
		else if (*p == '>')
			bputs(&b, "\\u003e");
		else if (*p == '&')
			bputs(&b, "\\u0026");
		else if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
			bputs(&b, p[2] == 0xa8 ? "\\u2028" : "\\u2029");
			p += 2;
		} else
			bput(&b, (const char *)p, 1);
	}
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

/* ---- every k-th of a stream, the last always: at most cap kept ---- */
struct thin {
	char *v; /* kept items, size bytes each */
	size_t size, n, cap;
	long stride, seen; /* items kept are those whose index is a multiple of stride */
	char *last;	   /* the latest item (kept or not) */
	int last_kept;
	void (*drop)(void *item); /* frees what an item owns */
};

static int thin_init(struct thin *t, size_t size, size_t cap, void (*drop)(void *))
{
	memset(t, 0, sizeof(*t));
	t->size = size;
	t->cap = cap;
	t->stride = 1;
	t->drop = drop;
	t->v = calloc(cap + 1, size); /* + 1: the last, appended at the end */
	t->last = calloc(1, size);
	return t->v && t->last ? 0 : -1;
}

/* Takes over what item owns. */
static void thin_add(struct thin *t, const void *item)
{
	if (!t->last_kept && t->seen > 0 && t->drop)
		t->drop(t->last);
	memcpy(t->last, item, t->size);
	t->last_kept = 0;
	if (t->seen % t->stride == 0) {
		if (t->n == t->cap) { /* keep every other one: the multiples of twice the stride */
			size_t k = 0;
			for (size_t i = 0; i < t->n; i++) {
				if (i % 2 == 0)
					memmove(t->v + k++ * t->size, t->v + i * t->size, t->size);
				else if (t->drop)
					t->drop(t->v + i * t->size);
			}
			t->n = k;
			t->stride *= 2;
		}
		if (t->seen % t->stride == 0) {
			memcpy(t->v + t->n++ * t->size, item, t->size);
			t->last_kept = 1;
		}
	}
	t->seen++;
}

/* The last item appended when it was not kept; then v[0..n) is the stream's sample. */
static void thin_finish(struct thin *t)
{
	if (t->seen > 0 && !t->last_kept) {
		memcpy(t->v + t->n++ * t->size, t->last, t->size);
		t->last_kept = 1;
	}
}

static void thin_free(struct thin *t)
{
	if (t->drop) {
		for (size_t i = 0; i < t->n; i++)
			t->drop(t->v + i * t->size);
		if (t->seen > 0 && !t->last_kept)
			t->drop(t->last);
	}
	free(t->v);
	free(t->last);
	memset(t, 0, sizeof(*t));
}

#define AT(t, type, i) ((type *)((t)->v + (i) * (t)->size))

/* ---- what the lines say ---- */
struct tpoint { /* a train event */
	long step;
	int run;
	double time, loss, lr, ips, data_ms, comm_ms, compute_ms, step_ms, eta;
};

struct epoint { /* an eval event */
	long step;
	int run;
	double time, acc, loss;
};

struct ckpt { /* a checkpoint event */
	long step;
	int run;
	double time;
	char *path;
};

struct strag { /* a straggler event */
	long step;
	int run;
	double time, slower, step_ms, median_ms;
	int rank, gpu;
	long window;
	char *node, *cause;
};

struct hcol { /* a ranks event: one column of the heat map */
	long step;
	int run;
	double time;
	int world, group, rows; /* ranks; ranks per row; rows */
	double *ms;		/* rows values: a row's largest step_ms (NaN: none) */
};

struct runinfo { /* a start event, and how that run went */
	long line;
	double time;
	char *model, *job;
	int world, hosts;
	long total, params, resumed_from, restart_count;
	int schema;
	long last_step; /* the largest global_step of its lines */
	double last_time;
	int ended, stopped;
	char *signal; /* the stop's */
	long end_steps;
	double end_seconds, end_acc;
};

struct rep {
	const char *dir;
	char path[4096]; /* metrics.jsonl's */
	const struct report_opts *o;
	struct thin train, eval, ckpts, strags, heat;
	struct runinfo *runs;
	int nruns;
	long lines, good, bad, ignored_runs;
	double last_time; /* the latest "time" of any line; NAN: none (schema 1) */
	double mtime;	  /* metrics.jsonl's modification time */
	char **labels;	  /* the latest ranks event's "node" per rank (world <= MAX_LABELS) */
	int nlabels;
	char *problems[MAX_PROBLEMS];
	int nproblems;
	long more_problems;
	double best_acc;
	long best_step;
};

static void drop_ckpt(void *p)
{
	free(((struct ckpt *)p)->path);
}

static void drop_strag(void *p)
{
	struct strag *s = p;
	free(s->node);
	free(s->cause);
}

static void drop_hcol(void *p)
{
	free(((struct hcol *)p)->ms);
}

static void problem(struct rep *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct rep *r, const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (r->o->warn)
		r->o->warn(r->o->arg, s);
	if (r->nproblems < MAX_PROBLEMS)
		r->problems[r->nproblems++] = s;
	else {
		r->more_problems++;
		free(s);
	}
}

static double num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* an integer field, dflt where it is missing or out of range */
static long inum(json_t *o, const char *k, long dflt)
{
	double d = num(o, k);
	if (!isfinite(d) || d < -1e15 || d > 1e15)
		return dflt;
	return (long)d;
}

static char *sdup(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

/* The run the line belongs to: the latest start's, or one without a start line (its line
 * lost, or a file that begins mid-run). */
static struct runinfo *cur_run(struct rep *r)
{
	if (r->nruns == 0) {
		struct runinfo *ri = calloc(1, sizeof(*ri));
		if (!ri)
			return NULL;
		ri->world = -1;
		ri->total = -1;
		ri->params = -1;
		ri->resumed_from = -1;
		ri->restart_count = -1;
		ri->last_step = -1;
		ri->time = NAN;
		ri->last_time = NAN;
		ri->line = 0;
		r->runs = ri;
		r->nruns = 1;
	}
	return &r->runs[r->nruns - 1];
}

static int on_start(struct rep *r, json_t *o, long line)
{
	if (r->nruns >= MAX_RUNS) {
		r->ignored_runs++;
		return 0;
	}
	struct runinfo *ri = realloc(r->runs, (size_t)(r->nruns + 1) * sizeof(*ri));
	if (!ri)
		return -1;
	r->runs = ri;
	ri = &r->runs[r->nruns++];
	memset(ri, 0, sizeof(*ri));
	ri->line = line;
	ri->time = num(o, "time");
	ri->model = sdup(o, "model");
	ri->job = sdup(o, "job");
	ri->world = (int)inum(o, "world_size", -1);
	ri->hosts = (int)inum(o, "hosts", -1);
	ri->total = inum(o, "total_steps", -1);
	ri->params = inum(o, "parameters", -1);
	ri->resumed_from = inum(o, "resumed_from_step", -1);
	ri->restart_count = inum(o, "restart_count", -1);
	ri->schema = (int)inum(o, "schema", 1);
	ri->last_step = ri->resumed_from >= 0 ? ri->resumed_from : -1;
	ri->last_time = NAN;
	return 0;
}

static int on_ranks(struct rep *r, json_t *o, long step, double t)
{
	json_t *a = json_object_get(o, "ranks");
	size_t w = json_array_size(a);
	if (!json_is_array(a) || w == 0 || w > RT_WORLD_MAX)
		return 0;
	struct hcol h = {.step = step, .run = r->nruns - 1, .time = t, .world = (int)w};
	h.group = (int)((w + MAX_ROWS - 1) / MAX_ROWS);
	h.rows = (int)((w + (size_t)h.group - 1) / (size_t)h.group);
	if (!(h.ms = malloc((size_t)h.rows * sizeof(double))))
		return -1;
	for (int i = 0; i < h.rows; i++)
		h.ms[i] = NAN;
	if (w <= MAX_LABELS) {
		for (int i = 0; i < r->nlabels; i++)
			free(r->labels[i]);
		free(r->labels);
		r->nlabels = 0;
		if (!(r->labels = calloc(w, sizeof(char *)))) {
			free(h.ms);
			return -1;
		}
		r->nlabels = (int)w;
	}
	for (size_t i = 0; i < w; i++) {
		json_t *e = json_array_get(a, i);
		long rank = inum(e, "rank", (long)i);
		if (rank < 0 || (size_t)rank >= w)
			rank = (long)i;
		double ms = num(e, "step_ms");
		int row = (int)(rank / h.group);
		if (isfinite(ms) && (isnan(h.ms[row]) || ms > h.ms[row]))
			h.ms[row] = ms;
		if (w <= MAX_LABELS && !r->labels[rank]) {
			json_t *node = json_object_get(e, "node");
			long gpu = inum(e, "gpu", -1);
			char *s = NULL;
			if (json_is_string(node) && gpu >= 0) {
				if (asprintf(&s, "%s gpu %ld", json_string_value(node), gpu) < 0)
					s = NULL;
			} else if (json_is_string(node))
				s = strdup(json_string_value(node));
			r->labels[rank] = s;
		}
	}
	thin_add(&r->heat, &h);
	return 0;
}

/* One line's event; -1: out of memory. */
static int on_event(struct rep *r, json_t *o, const char *ev, long line)
{
	long step = inum(o, "global_step", -1);
	double t = num(o, "time");
	if (strcmp(ev, "start") == 0)
		return on_start(r, o, line);
	struct runinfo *ri = cur_run(r);
	if (!ri)
		return -1;
	int run = r->nruns - 1;
	if (isfinite(t)) {
		ri->last_time = t;
		if (isnan(r->last_time) || t > r->last_time)
			r->last_time = t;
	}
	if (strcmp(ev, "end") == 0) {
		ri->ended = 1;
		ri->end_steps = inum(o, "steps", -1);
		ri->end_seconds = num(o, "seconds");
		ri->end_acc = num(o, "eval_accuracy");
		if (ri->end_steps > ri->last_step)
			ri->last_step = ri->end_steps;
		return 0;
	}
	if (step > ri->last_step)
		ri->last_step = step;
	if (strcmp(ev, "train") == 0) {
		struct tpoint p = {.step = step,
				   .run = run,
				   .time = t,
				   .loss = num(o, "loss"),
				   .lr = num(o, "lr"),
				   .ips = num(o, "img_per_s"),
				   .data_ms = num(o, "data_wait_ms"),
				   .comm_ms = num(o, "comm_wait_ms"),
				   .compute_ms = num(o, "compute_ms"),
				   .step_ms = num(o, "step_ms"),
				   .eta = num(o, "eta_s")};
		thin_add(&r->train, &p);
	} else if (strcmp(ev, "eval") == 0) {
		struct epoint p = {.step = step,
				   .run = run,
				   .time = t,
				   .acc = num(o, "accuracy"),
				   .loss = num(o, "loss")};
		if (isfinite(p.acc) && (isnan(r->best_acc) || p.acc > r->best_acc)) {
			r->best_acc = p.acc;
			r->best_step = step;
		}
		thin_add(&r->eval, &p);
	} else if (strcmp(ev, "checkpoint") == 0) {
		struct ckpt c = {.step = step, .run = run, .time = t, .path = sdup(o, "path")};
		thin_add(&r->ckpts, &c);
	} else if (strcmp(ev, "straggler") == 0) {
		struct strag s = {.step = step,
				  .run = run,
				  .time = t,
				  .slower = num(o, "slower"),
				  .step_ms = num(o, "step_ms"),
				  .median_ms = num(o, "median_step_ms"),
				  .rank = (int)inum(o, "rank", -1),
				  .gpu = (int)inum(o, "gpu", -1),
				  .window = inum(o, "window", -1),
				  .node = sdup(o, "node"),
				  .cause = sdup(o, "cause")};
		thin_add(&r->strags, &s);
	} else if (strcmp(ev, "stop") == 0) {
		ri->stopped = 1;
		free(ri->signal);
		ri->signal = sdup(o, "signal");
	} else if (strcmp(ev, "ranks") == 0) {
		return on_ranks(r, o, step, t);
	}
	return 0; /* an event of a later version: ignored */
}

/* metrics.jsonl, line by line. -1 with err: cannot read it at all. */
static int read_metrics(struct rep *r, struct dp_error *err)
{
	snprintf(r->path, sizeof(r->path), "%s/metrics.jsonl", r->dir);
	int fd = dp_open_regular(r->path, O_RDONLY, 0, 0, NULL, err);
	if (fd < 0) {
		if (errno == ENOENT)
			return errprintf(err,
					 "%s: no such file: not a dptrain output directory, or "
					 "the run has not started (or has output.metrics false)",
					 r->path);
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) == 0)
		r->mtime = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
	FILE *f = fdopen(fd, "r");
	if (!f) {
		int e = errno;
		close(fd);
		return errprintf(err, "%s: %s", r->path, strerror(e));
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int rv = 0;
	while ((len = getline(&line, &cap, f)) > 0) {
		r->lines++;
		int complete = line[len - 1] == '\n';
		if (complete)
			line[--len] = '\0';
		size_t blank = strspn(line, " \t\r");
		if ((ssize_t)blank == len)
			continue;
		json_error_t je;
		json_t *o = json_loadb(line, (size_t)len, JSON_REJECT_DUPLICATES, &je);
		const char *ev;
		if (!o) {
			r->bad++;
			if (!complete)
				problem(r,
					"%s:%ld: the last line is incomplete (the run was stopped "
					"while writing it?): ignored",
					r->path, r->lines);
			else
				problem(r, "%s:%ld: not JSON (%s, column %d): line skipped",
					r->path, r->lines, je.text, je.column);
			continue;
		}
		json_t *e = json_object_get(o, "event");
		if (!json_is_object(o) || !json_is_string(e)) {
			r->bad++;
			problem(r, "%s:%ld: not an event (no \"event\" name): line skipped",
				r->path, r->lines);
			json_decref(o);
			continue;
		}
		ev = json_string_value(e);
		rv = on_event(r, o, ev, r->lines);
		json_decref(o);
		if (rv < 0) {
			errprintf(err, "%s:%ld: out of memory", r->path, r->lines);
			break;
		}
		r->good++;
	}
	if (rv == 0 && ferror(f))
		rv = errprintf(err, "%s: cannot read: %s", r->path, strerror(errno));
	free(line);
	fclose(f);
	if (rv < 0)
		return -1;
	if (r->lines == 0)
		return errprintf(err, "%s: empty: no event written yet (has the run started?)",
				 r->path);
	if (r->good == 0)
		return errprintf(err, "%s: none of its %ld line%s is an event", r->path, r->lines,
				 r->lines == 1 ? "" : "s");
	return 0;
}

/* ---- the page ---- */
static json_t *jnum(double d)
{
	return isfinite(d) ? json_real(d) : json_null();
}

static json_t *jstr(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* json_array_append_new that notes a failure */
static void app(json_t *a, json_t *v, int *bad)
{
	if (!v || json_array_append_new(a, v) < 0)
		*bad = 1;
}

static void set(json_t *o, const char *k, json_t *v, int *bad)
{
	if (!v || json_object_set_new(o, k, v) < 0)
		*bad = 1;
}

static json_t *column(struct thin *t, size_t off, int integer, int *bad)
{
	json_t *a = json_array();
	if (!a) {
		*bad = 1;
		return NULL;
	}
	for (size_t i = 0; i < t->n; i++) {
		const char *item = t->v + i * t->size + off;
		if (integer == 2)
			app(a, json_integer(*(const int *)item), bad);
		else if (integer)
			app(a, json_integer(*(const long *)item), bad);
		else
			app(a, jnum(*(const double *)item), bad);
	}
	return a;
}

/* The status of the last run: finished, stopped or running. */
static const char *status_of(const struct runinfo *ri)
{
	return ri->ended ? "finished" : ri->stopped ? "stopped" : "running";
}

static json_t *page_data(struct rep *r, int *bad)
{
	json_t *d = json_object(), *t = json_object(), *e = json_object(), *m = json_array(),
	       *h = json_object();
	if (!d || !t || !e || !m || !h) {
		json_decref(d);
		json_decref(t);
		json_decref(e);
		json_decref(m);
		json_decref(h);
		*bad = 1;
		return NULL;
	}
	set(d, "train", t, bad);
	set(d, "eval", e, bad);
	set(d, "markers", m, bad);
	set(d, "heat", h, bad);
#define TCOL(name, field, integer)                                                                 \
	set(t, name, column(&r->train, offsetof(struct tpoint, field), integer, bad), bad)
	TCOL("step", step, 1);
	TCOL("run", run, 2);
	TCOL("time", time, 0);
	TCOL("loss", loss, 0);
	TCOL("lr", lr, 0);
	TCOL("img_per_s", ips, 0);
	TCOL("data_wait_ms", data_ms, 0);
	TCOL("comm_wait_ms", comm_ms, 0);
	TCOL("compute_ms", compute_ms, 0);
	TCOL("step_ms", step_ms, 0);
#undef TCOL
	set(t, "every", json_integer(r->train.stride), bad);
	set(t, "lines", json_integer(r->train.seen), bad);
#define ECOL(name, field, integer)                                                                 \
	set(e, name, column(&r->eval, offsetof(struct epoint, field), integer, bad), bad)
	ECOL("step", step, 1);
	ECOL("run", run, 2);
	ECOL("time", time, 0);
	ECOL("accuracy", acc, 0);
	ECOL("loss", loss, 0);
#undef ECOL
	/* markers: checkpoints, resumes, stops, ends, runs lost, stragglers */
	for (size_t i = 0; i < r->ckpts.n; i++) {
		struct ckpt *c = AT(&r->ckpts, struct ckpt, i);
		app(m,
		    json_pack("{s:s,s:I,s:o,s:o}", "kind", "checkpoint", "step",
			      (json_int_t)c->step, "time", jnum(c->time), "text", jstr(c->path)),
		    bad);
	}
	for (int i = 0; i < r->nruns; i++) {
		struct runinfo *ri = &r->runs[i];
		if (i > 0 || ri->resumed_from > 0) {
			long at = ri->resumed_from >= 0 ? ri->resumed_from
				  : i > 0		? r->runs[i - 1].last_step
							: -1;
			char text[160];
			snprintf(text, sizeof(text), "%s%s",
				 ri->resumed_from > 0	 ? "resumed from a checkpoint"
				 : ri->resumed_from == 0 ? "started again from step 0"
							 : "started again",
				 ri->restart_count > 0 ? " (the job was requeued)" : "");
			if (at >= 0)
				app(m,
				    json_pack("{s:s,s:I,s:o,s:s}", "kind", "resume", "step",
					      (json_int_t)at, "time", jnum(ri->time), "text", text),
				    bad);
		}
	}
	for (int i = 0; i < r->nruns; i++) { /* drawn over the resumes */
		struct runinfo *ri = &r->runs[i];
		if (ri->stopped)
			app(m,
			    json_pack("{s:s,s:I,s:o,s:o}", "kind", "stop", "step",
				      (json_int_t)ri->last_step, "time", jnum(ri->last_time),
				      "text", jstr(ri->signal)),
			    bad);
		else if (ri->ended)
			app(m,
			    json_pack("{s:s,s:I,s:o,s:s}", "kind", "end", "step",
				      (json_int_t)ri->last_step, "time", jnum(ri->last_time),
				      "text", "finished"),
			    bad);
		else if (i + 1 < r->nruns && ri->last_step >= 0)
			app(m,
			    json_pack("{s:s,s:I,s:o,s:s}", "kind", "lost", "step",
				      (json_int_t)ri->last_step, "time", jnum(ri->last_time),
				      "text",
				      "ended without an end line (killed, crashed or preempted)"),
			    bad);
	}
	for (size_t i = 0; i < r->strags.n; i++) {
		struct strag *s = AT(&r->strags, struct strag, i);
		char text[256];
		snprintf(text, sizeof(text), "rank %d on %s: %.2fx the median step (%s)", s->rank,
			 s->node ? s->node : "?", s->slower, s->cause ? s->cause : "?");
		app(m,
		    json_pack("{s:s,s:I,s:o,s:s}", "kind", "straggler", "step", (json_int_t)s->step,
			      "time", jnum(s->time), "text", text),
		    bad);
	}
	/* the heat map */
	json_t *steps = json_array(), *cols = json_array(), *labels = json_array();
	int world = 0;
	for (size_t i = 0; i < r->heat.n; i++) {
		struct hcol *c = AT(&r->heat, struct hcol, i);
		json_t *v = json_array();
		if (!v) {
			*bad = 1;
			break;
		}
		for (int k = 0; k < c->rows; k++)
			app(v, jnum(c->ms[k]), bad);
		app(steps, json_integer(c->step), bad);
		app(cols, json_pack("{s:i,s:i,s:o}", "world", c->world, "group", c->group, "ms", v),
		    bad);
		if (c->world > world)
			world = c->world;
	}
	for (int i = 0; i < r->nlabels; i++)
		app(labels, jstr(r->labels[i]), bad);
	set(h, "step", steps, bad);
	set(h, "columns", cols, bad);
	set(h, "labels", labels, bad);
	set(h, "world", json_integer(world), bad);
	set(h, "every", json_integer(r->heat.stride), bad);
	/* the summary, for the script's "minutes ago" */
	struct runinfo *last = &r->runs[r->nruns - 1];
	set(d, "status", json_string(status_of(last)), bad);
	set(d, "last_update", jnum(isfinite(r->last_time) ? r->last_time : r->mtime), bad);
	set(d, "generated", json_integer((json_int_t)time(NULL)), bad);
	set(d, "total_steps", json_integer(last->total), bad);
	return d;
}

static void put_time(struct buf *b, double t)
{
	if (!isfinite(t) || t < 0 || t > 1e12) { /* none, or no time (a bad line's) */
		bputs(b, "&mdash;");
		return;
	}
	time_t s = (time_t)t;
	struct tm tm;
	char text[64];
	if (!gmtime_r(&s, &tm) || !strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &tm)) {
		bputs(b, "&mdash;");
		return;
	}
	bputs(b, text);
}

static void put_num(struct buf *b, double d, const char *fmt)
{
	if (isfinite(d))
		bprintf(b, fmt, d);
	else
		bputs(b, "&mdash;");
}

static void put_summary(struct buf *b, struct rep *r)
{
	struct runinfo *last = &r->runs[r->nruns - 1];
	const char *model = NULL;
	int world = -1;
	long total = -1, done = -1;
	for (int i = 0; i < r->nruns; i++) {
		struct runinfo *ri = &r->runs[i];
		if (ri->model)
			model = ri->model;
		if (ri->world > 0)
			world = ri->world;
		if (ri->total > 0)
			total = ri->total;
		if (ri->last_step > done)
			done = ri->last_step;
	}
	double last_loss = NAN;
	if (r->train.n)
		last_loss = AT(&r->train, struct tpoint, r->train.n - 1)->loss;
	const char *status = status_of(last);
	bputs(b, "<section class=\"summary\"><dl>");
	bputs(b, "<div><dt>status</dt><dd id=\"status\" class=\"status ");
	bputs(b, status);
	bputs(b, "\">");
	bputs(b, status);
	if (last->stopped) {
		bputs(b, " (");
		bhtml(b, last->signal ? last->signal : "on request");
		bputs(b, ")");
	}
	bputs(b, "</dd></div>");
	bputs(b, "<div><dt>model</dt><dd id=\"model\">");
	bhtml(b, model ? model : "?");
	bputs(b, "</dd></div><div><dt>world size</dt><dd id=\"world\">");
	if (world > 0)
		bprintf(b, "%d rank%s", world, world == 1 ? "" : "s");
	else
		bputs(b, "?");
	if (last->hosts > 0)
		bprintf(b, " on %d node%s", last->hosts, last->hosts == 1 ? "" : "s");
	bputs(b, "</dd></div><div><dt>steps</dt><dd id=\"steps\">");
	if (done >= 0)
		bprintf(b, "%ld", done);
	else
		bputs(b, "0");
	if (total > 0)
		bprintf(b, " of %ld (%.0f%%)", total,
			100.0 * (double)(done > 0 ? done : 0) / total);
	bputs(b, "</dd></div><div><dt>last loss</dt><dd id=\"last-loss\">");
	put_num(b, last_loss, "%.6g");
	bputs(b, "</dd></div><div><dt>best accuracy</dt><dd id=\"best-acc\">");
	if (isfinite(r->best_acc))
		bprintf(b, "%.4f <small>at step %ld</small>", r->best_acc, r->best_step);
	else
		bputs(b, "&mdash; <small>(no evaluation yet)</small>");
	bputs(b, "</dd></div><div><dt>last update</dt><dd id=\"last-update\">");
	put_time(b, isfinite(r->last_time) ? r->last_time : r->mtime);
	bputs(b, " <small id=\"ago\"></small></dd></div>");
	if (last->job && *last->job) {
		bputs(b, "<div><dt>job</dt><dd>");
		bhtml(b, last->job);
		if (last->restart_count > 0)
			bprintf(b, " <small>(restart %ld)</small>", last->restart_count);
		bputs(b, "</dd></div>");
	}
	bprintf(b, "<div><dt>runs</dt><dd id=\"runs\">%d%s</dd></div>", r->nruns,
		r->nruns > 1 ? " <small>(resumed or restarted)</small>" : "");
	bputs(b, "</dl>");
	if (last->stopped)
		bprintf(b,
			"<p id=\"status-note\">Stopped on request at step %ld: a checkpoint was "
			"written; submit the job again to resume.</p>",
			last->last_step);
	else if (!last->ended)
		bputs(b, "<p id=\"status-note\">No end line yet: if the job is no longer running, "
			 "it was killed or crashed (see its train.log).</p>");
	bputs(b, "</section>\n");
}

static void put_problems(struct buf *b, struct rep *r, const char *rt_problem)
{
	if (!r->nproblems && !rt_problem)
		return;
	bputs(b, "<section class=\"problems\" id=\"problems\"><h2>Problems reading the "
		 "output</h2><ul>");
	for (int i = 0; i < r->nproblems; i++) {
		bputs(b, "<li>");
		bhtml(b, r->problems[i]);
		bputs(b, "</li>");
	}
	if (r->more_problems)
		bprintf(b, "<li>and %ld more</li>", r->more_problems);
	if (r->ignored_runs)
		bprintf(b, "<li>%ld start events past the first %d not shown</li>", r->ignored_runs,
			MAX_RUNS);
	if (rt_problem) {
		bputs(b, "<li>");
		bhtml(b, rt_problem);
		bputs(b, "</li>");
	}
	bputs(b, "</ul></section>\n");
}

static void put_runs(struct buf *b, struct rep *r)
{
	bputs(b, "<section><h2>Runs</h2><table id=\"runs-table\"><tr><th>#</th><th>started</th>"
		 "<th>from step</th><th>job</th><th>ranks</th><th>last step</th><th>how it "
		 "ended</th></tr>");
	for (int i = 0; i < r->nruns; i++) {
		struct runinfo *ri = &r->runs[i];
		bprintf(b, "<tr><td>%d</td><td>", i + 1);
		put_time(b, ri->time);
		bputs(b, "</td><td>");
		if (ri->resumed_from >= 0)
			bprintf(b, "%ld", ri->resumed_from);
		else
			bputs(b, "&mdash;");
		bputs(b, "</td><td>");
		bhtml(b, ri->job && *ri->job ? ri->job : "");
		if (ri->restart_count > 0)
			bprintf(b, " (restart %ld)", ri->restart_count);
		bputs(b, "</td><td>");
		if (ri->world > 0)
			bprintf(b, "%d", ri->world);
		bputs(b, "</td><td>");
		if (ri->last_step >= 0)
			bprintf(b, "%ld", ri->last_step);
		bputs(b, "</td><td>");
		if (ri->ended) {
			bputs(b, "finished");
			if (isfinite(ri->end_seconds))
				bprintf(b, " in %.0f s", ri->end_seconds);
		} else if (ri->stopped) {
			bputs(b, "stopped: ");
			bhtml(b, ri->signal ? ri->signal : "on request");
		} else if (i + 1 < r->nruns)
			bputs(b, "<span class=\"bad\">no end line: killed, crashed or "
				 "preempted</span>");
		else
			bputs(b, "running");
		bputs(b, "</td></tr>");
	}
	bputs(b, "</table></section>\n");
}

static void put_stragglers(struct buf *b, struct rep *r)
{
	bputs(b, "<section><h2>Stragglers</h2>");
	if (!r->strags.n) {
		bputs(b, "<p id=\"stragglers-none\">None reported.</p></section>\n");
		return;
	}
	if (r->strags.stride > 1)
		bprintf(b, "<p>%ld episodes; every %ld-th listed.</p>", r->strags.seen,
			r->strags.stride);
	bputs(b, "<table id=\"stragglers\"><tr><th>step</th><th>time</th><th>rank</th><th>node"
		 "</th><th>GPU</th><th>slower</th><th>cause</th><th>step ms</th><th>median "
		 "ms</th></tr>");
	for (size_t i = 0; i < r->strags.n; i++) {
		struct strag *s = AT(&r->strags, struct strag, i);
		bprintf(b, "<tr><td>%ld</td><td>", s->step);
		put_time(b, s->time);
		bprintf(b, "</td><td>%d</td><td>", s->rank);
		bhtml(b, s->node ? s->node : "?");
		bputs(b, "</td><td>");
		if (s->gpu >= 0)
			bprintf(b, "%d", s->gpu);
		else
			bputs(b, "CPU");
		bputs(b, "</td><td>");
		put_num(b, s->slower, "%.2fx");
		bputs(b, "</td><td>");
		bhtml(b, s->cause ? s->cause : "?");
		bputs(b, "</td><td>");
		put_num(b, s->step_ms, "%.1f");
		bputs(b, "</td><td>");
		put_num(b, s->median_ms, "%.1f");
		bputs(b, "</td></tr>");
	}
	bputs(b, "</table></section>\n");
}

static void put_checkpoints(struct buf *b, struct rep *r)
{
	bputs(b, "<section><h2>Checkpoints</h2>");
	if (!r->ckpts.n) {
		bputs(b,
		      "<p id=\"checkpoints-none\">None reported in metrics.jsonl (runs of "
		      "older versions do not say; see the checkpoint directory).</p></section>\n");
		return;
	}
	if (r->ckpts.stride > 1)
		bprintf(b, "<p>%ld checkpoints; every %ld-th listed.</p>", r->ckpts.seen,
			r->ckpts.stride);
	bputs(b, "<table id=\"checkpoints\"><tr><th>step</th><th>time</th><th>path</th></tr>");
	for (size_t i = 0; i < r->ckpts.n; i++) {
		struct ckpt *c = AT(&r->ckpts, struct ckpt, i);
		bprintf(b, "<tr><td>%ld</td><td>", c->step);
		put_time(b, c->time);
		bputs(b, "</td><td>");
		bhtml(b, c->path ? c->path : "");
		bputs(b, "</td></tr>");
	}
	bputs(b, "</table></section>\n");
}

/* rank_table.json; *why: the problem with it, or NULL when there is none or it was fine */
static void put_ranktable(struct buf *b, const char *dir, char **why)
{
	char path[4096];
	struct ranktable rt = {0};
	struct dp_error err;
	*why = NULL;
	snprintf(path, sizeof(path), "%s/rank_table.json", dir);
	bputs(b, "<section><h2>Rank table</h2>");
	if (access(path, F_OK) != 0) {
		bputs(b, "<p id=\"ranktable-none\">No rank_table.json (a run started without "
			 "dptrain-launch: one rank, or torchrun-style variables).</p></section>\n");
		return;
	}
	if (rt_read(&rt, path, &err) < 0) {
		if (asprintf(why, "%s", err.text) < 0)
			*why = NULL;
		bputs(b, "<p class=\"bad\">");
		bhtml(b, err.text);
		bputs(b, "</p></section>\n");
		return;
	}
	bprintf(b, "<p>%d rank%s on %d node%s", rt.world_size, rt.world_size == 1 ? "" : "s",
		rt.node_count, rt.node_count == 1 ? "" : "s");
	if (rt.master_addr[0]) {
		bputs(b, "; master ");
		bhtml(b, rt.master_addr);
		if (rt.master_port)
			bprintf(b, ":%d", rt.master_port);
	}
	if (rt.job_id[0]) {
		bputs(b, "; job ");
		bhtml(b, rt.job_id);
		if (rt.step_id[0]) {
			bputs(b, ".");
			bhtml(b, rt.step_id);
		}
	}
	bprintf(b, " (%s schema)</p>", rt_schema_name(rt.schema));
	bputs(b, "<table id=\"ranktable\"><tr><th>rank</th><th>node</th><th>node "
		 "rank</th><th>address</th><th>local rank</th><th>GPU</th></tr>");
	int shown = rt.world_size < MAX_LISTED ? rt.world_size : MAX_LISTED;
	for (int i = 0; i < shown; i++) {
		const struct rt_rank *k = &rt.ranks[i];
		bprintf(b, "<tr><td>%d</td><td>", i);
		bhtml(b, k->host);
		bprintf(b, "</td><td>%d</td><td>", k->node_rank);
		bhtml(b, k->addr[0] ? k->addr : k->server_id);
		bprintf(b, "</td><td>%d</td><td>", k->local_rank);
		if (k->gpu >= 0)
			bprintf(b, "%d", k->gpu);
		else
			bputs(b, "CPU");
		bputs(b, "</td></tr>");
	}
	bputs(b, "</table>");
	if (shown < rt.world_size)
		bprintf(b, "<p>and %d more ranks (dptrain-ranktable show %s).</p>",
			rt.world_size - shown, "rank_table.json");
	bputs(b, "</section>\n");
	rt_free(&rt);
}

static void put_config(struct buf *b, const struct report_opts *o)
{
	bputs(b, "<section><h2>Config</h2>");
	if (!o->config) {
		bputs(b, "<p id=\"config-none\">");
		bhtml(b, o->config_note ? o->config_note : "No config given.");
		bputs(b, "</p></section>\n");
		return;
	}
	if (o->config_from) {
		bputs(b, "<p>");
		bhtml(b, o->config_from);
		bputs(b, "</p>");
	}
	bputs(b, "<pre id=\"config\">");
	size_t n = strlen(o->config);
	if (n > MAX_CONFIG) {
		char *cut = strndup(o->config, MAX_CONFIG);
		bhtml(b, cut ? cut : "");
		free(cut);
		bprintf(b, "\n... (%zu more bytes)", n - MAX_CONFIG);
	} else
		bhtml(b, o->config);
	bputs(b, "</pre></section>\n");
}

static void put_page(struct buf *b, struct rep *r, const char *data)
{
	struct runinfo *last = &r->runs[r->nruns - 1];
	char *rt_problem = NULL;
	struct buf rtb = {0};
	put_ranktable(&rtb, r->dir, &rt_problem);
	if (rt_problem && r->o->warn)
		r->o->warn(r->o->arg, rt_problem);

	bputs(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
		 "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
		 "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
		 "base-uri 'none'; form-action 'none'\">\n"
		 "<meta name=\"viewport\" content=\"width=device-width\">\n<title>");
	bhtml(b, status_of(last));
	bputs(b, " &middot; ");
	bhtml(b, last->model ? last->model : "dptrain");
	bputs(b, " &middot; ");
	bhtml(b, r->dir);
	bputs(b, "</title>\n<style>");
	bputs(b, report_page_css);
	bputs(b, "</style></head>\n<body>\n<header><h1>dptrain report <small>");
	bhtml(b, r->dir);
	bputs(b, "</small></h1></header>\n");
	put_summary(b, r);
	put_problems(b, r, rt_problem);
	bputs(b, "<noscript><p class=\"bad\">The curves are drawn by the page's script: allow "
		 "scripts for this file.</p></noscript>\n");
	bputs(b, "<section class=\"charts\" id=\"charts\"></section>\n");
	put_runs(b, r);
	put_stragglers(b, r);
	put_checkpoints(b, r);
	if (rtb.oom)
		b->oom = 1;
	else if (rtb.p)
		bputs(b, rtb.p);
	free(rtb.p);
	free(rt_problem);
	put_config(b, r->o);
	bputs(b, "<footer>Written by dptrain-report " DPTRAIN_VERSION " at ");
	put_time(b, (double)time(NULL));
	bputs(b, " from ");
	bhtml(b, r->path);
	bprintf(b, " (%ld line%s, %ld skipped).</footer>\n", r->lines, r->lines == 1 ? "" : "s",
		r->bad);
	bputs(b, "<script type=\"application/json\" id=\"dp-data\">");
	bputs(b, data);
	bputs(b, "</script>\n<script>");
	bputs(b, report_page_js);
	bputs(b, "</script>\n</body></html>\n");
}

static void rep_free(struct rep *r)
{
	thin_free(&r->train);
	thin_free(&r->eval);
	thin_free(&r->ckpts);
	thin_free(&r->strags);
	thin_free(&r->heat);
	for (int i = 0; i < r->nruns; i++) {
		free(r->runs[i].model);
		free(r->runs[i].job);
		free(r->runs[i].signal);
	}
	free(r->runs);
	for (int i = 0; i < r->nlabels; i++)
		free(r->labels[i]);
	free(r->labels);
	for (int i = 0; i < r->nproblems; i++)
		free(r->problems[i]);
}

int report_write(const char *dir, const struct report_opts *o, struct dp_error *err)
{
	static const struct report_opts none = {0};
	struct rep r = {.dir = dir,
			.o = o ? o : &none,
			.last_time = NAN,
			.mtime = NAN,
			.best_acc = NAN,
			.best_step = -1};
	struct buf page = {0};
	char *json = NULL, *safe = NULL, out[4096];
	json_t *data = NULL;
	int rv = -1, bad = 0;
	o = r.o;
	if (snprintf(out, sizeof(out), "%s%s", o->output ? o->output : dir,
		     o->output ? "" : "/report.html") >= (int)sizeof(out) ||
	    strlen(dir) > sizeof(r.path) - sizeof("/metrics.jsonl"))
		return errprintf(err, "%s: path too long", o->output ? o->output : dir);
	if (thin_init(&r.train, sizeof(struct tpoint), MAX_POINTS, NULL) < 0 ||
	    thin_init(&r.eval, sizeof(struct epoint), MAX_POINTS, NULL) < 0 ||
	    thin_init(&r.ckpts, sizeof(struct ckpt), MAX_LISTED, drop_ckpt) < 0 ||
	    thin_init(&r.strags, sizeof(struct strag), MAX_LISTED, drop_strag) < 0 ||
	    thin_init(&r.heat, sizeof(struct hcol), MAX_COLUMNS, drop_hcol) < 0) {
		errprintf(err, "out of memory");
		goto out;
	}
	if (read_metrics(&r, err) < 0)
		goto out;
	thin_finish(&r.train);
	thin_finish(&r.eval);
	thin_finish(&r.ckpts);
	thin_finish(&r.strags);
	thin_finish(&r.heat);
	if (!(data = page_data(&r, &bad)) || bad ||
	    !(json = json_dumps(data, JSON_COMPACT | JSON_ENSURE_ASCII)) ||
	    !(safe = report_json_for_script(json))) {
		errprintf(err, "%s: out of memory", out);
		goto out;
	}
	put_page(&page, &r, safe);
	if (page.oom) {
		errprintf(err, "%s: out of memory", out);
		goto out;
	}
	rv = af_write(out, page.p, page.n, 0644, err);
out:
	json_decref(data);
	free(json);
	free(safe);
	free(page.p);
	rep_free(&r);
	return rv;
}

void report_update(const char *dir, const struct cfg *c)
{
	static atomic_int said;
	struct dp_error err;
	char *json = c ? cfg_to_json(c) : NULL;
	char from[4200];
	snprintf(from, sizeof(from), "As the trainer resolved it from %s and its overrides.",
		 c && c->path ? c->path : "its config");
	struct report_opts o = {.config = json, .config_from = from};
	if (report_write(dir, &o, &err) < 0 && !atomic_exchange(&said, 1))
		dp_warn("dptrain", NULL,
			"report.html not written (%s); training goes on, and dptrain-report "
			"writes it from the output directory",
			err.text);
	free(json);
}
