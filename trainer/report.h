/* report.h — report.html: one self-contained page that shows a training job from its output
 * directory (metrics.jsonl, rank_table.json, the config): the summary, the loss, accuracy,
 * learning-rate and throughput curves, the data/compute/communication split, the ranks' step
 * times as a heat map, checkpoints, resumes, stops and stragglers marked, the rank table and
 * the config. Inline CSS and script, the data embedded as JSON (every string escaped), a
 * Content-Security-Policy that forbids any network request: it opens from a file, offline.
 *
 * Reads metrics.jsonl of schema 1 (start, train, eval, end) and 2 (doc/dptrain-report.1),
 * ignoring unknown events and fields; a line that is not JSON, or an incomplete last line (a
 * run killed while writing it), is skipped and said. dptrain-report(1) is the program; rank 0
 * of the trainer writes the page at each evaluation and at the end (output.report). */
#ifndef DPTRAIN_REPORT_H
#define DPTRAIN_REPORT_H

#include "common/error.h"
#include "config/config.h"

struct report_opts {
	const char *output;	 /* the page's path; NULL: DIR/report.html */
	const char *config;	 /* the config's text to show; NULL: none */
	const char *config_from; /* where it came from (a path, "resolved by the trainer") */
	const char *config_note; /* why there is none, or NULL */
	/* each problem found in the input ("DIR/metrics.jsonl:7: not JSON ..."), also listed on
	 * the page; NULL: on the page only */
	void (*warn)(void *arg, const char *msg);
	void *arg;
};

/* Read DIR's metrics.jsonl and rank_table.json and write the page atomically (a temporary
 * beside it, renamed over it). 0: written (problems in the input said through o->warn); -1
 * with err: nothing usable (no metrics.jsonl, empty, no valid line), or the page could not be
 * written, and no page was written. */
int report_write(const char *dir, const struct report_opts *o, struct dp_error *err);

/* The trainer's: DIR/report.html with the resolved config c, after an evaluation and at the
 * end. Never fails the run: a failure is said once on stderr, and training goes on. */
void report_update(const char *dir, const struct cfg *c);

/* s escaped for HTML text and attribute values (& < > " '), malloc'd; NULL when out of
 * memory. For the tests. */
char *report_html_escape(const char *s);
/* A JSON value as text that is safe inside <script>: '<', '>', '&', U+2028 and U+2029 as \u
 * escapes (they occur only within strings); malloc'd, NULL when out of memory. */
char *report_json_for_script(const char *json);

#endif
