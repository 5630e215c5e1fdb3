/* metrics.h — rank 0's metrics.jsonl (output.metrics): one JSON object per line (start, train,
 * eval, end events), appended as each is written, so that a run that stops or crashes keeps
 * every line before. A line is written whole or not at all: one write(2) of the whole line,
 * and where the file system takes only part of it (full, a file-size limit) the file is cut
 * back to where the line began; the first failure is said once on stderr, naming the file,
 * and training goes on (a later line may fit again). Every line ends with "time", the
 * wall-clock UNIX time it was written (dptrain-metrics(5)). */
#ifndef DPTRAIN_METRICS_H
#define DPTRAIN_METRICS_H

#include <stddef.h>
#include "common/error.h"

/* All zero (as in a struct that holds one): no file, lines go nowhere (other ranks,
 * output.metrics false). */
struct metrics {
	int open; /* fd is metrics.jsonl's */
	int fd;
	int warned;	 /* the failure of a write was said */
	char path[4096]; /* for that message */
};

/* Opens dir/metrics.jsonl for appending (a resumed run adds to it); -1 with err naming it. */
int metrics_open(struct metrics *mt, const char *dir, struct dp_error *err);
/* One line: fmt and its arguments make one JSON object. */
void metrics_line(struct metrics *mt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void metrics_close(struct metrics *mt);
/* s as the inside of a JSON string (quotes, backslashes and control characters escaped) in
 * buf, cut at a whole character when it does not fit; "" for NULL. Returns buf. */
const char *metrics_json_str(char *buf, size_t n, const char *s);

#endif
