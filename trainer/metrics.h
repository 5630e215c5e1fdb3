/* metrics.h — rank 0's metrics.jsonl (output.metrics): one JSON object per line (start, train,
 * eval, end events), appended and flushed as each is written, so that a run that stops or
 * crashes keeps every line before. */
#ifndef DPTRAIN_METRICS_H
#define DPTRAIN_METRICS_H

#include <stddef.h>
#include <stdio.h>
#include "common/error.h"

struct metrics {
	FILE *f; /* NULL: lines go nowhere (other ranks, output.metrics false) */
};

/* Opens dir/metrics.jsonl for appending (a resumed run adds to it); -1 with err naming it. */
int metrics_open(struct metrics *mt, const char *dir, struct dp_error *err);
/* One line: fmt and its arguments make one JSON object. */
void metrics_line(struct metrics *mt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void metrics_close(struct metrics *mt);

#endif
