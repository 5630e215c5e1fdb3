/* progress.c (test) — trainer/progress.c: the ETA and its format, and what each mode writes to a
 * file (a loss line and rank 0's progress line; a loss line alone on other ranks; nothing when
 * off). The in-place form on a terminal is t/t0925-progress.t's (through script(1)). Owns
 * nothing outside its process. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/progress.h"
#include "t/lib/tap.h"

static char *written(enum progress_mode mode, int rank0)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct progress p;
	if (!f)
		bail_out("open_memstream");
	progress_init(&p, f, mode, rank0, 100, 1100, 1000.0);
	progress_loss(&p, "epoch: 2 step: 5, loss is 1.0", 2, 11, 200, 1010.0);
	progress_loss(&p, "epoch: 11 step: 100, loss is 0.5", 11, 11, 1100, 1100.0);
	progress_break(&p);
	fclose(f);
	return buf;
}

int main(void)
{
	struct progress p;
	char d[32], *s;

	progress_init(&p, stdout, PROGRESS_LINES, 1, 100, 1100, 1000.0);
	is_double(progress_eta(&p, 100, 1005.0), -1, 0, "no ETA before a step is done");
	is_double(progress_eta(&p, 200, 1010.0), 90, 1e-9, "100 steps in 10 s, 900 to go: 90 s");
	is_double(progress_eta(&p, 1100, 1100.0), 0, 0, "0 at the last step");
	progress_duration(d, sizeof(d), 3725.4);
	is(d, "1:02:05", "H:MM:SS");
	progress_duration(d, sizeof(d), 0);
	is(d, "0:00:00", "zero");
	progress_duration(d, sizeof(d), -1);
	is(d, "?", "unknown");
	progress_duration(d, sizeof(d), 360000);
	is(d, "100:00:00", "hours go on past 99");

	s = written(PROGRESS_LINES, 1);
	is(s,
	   "epoch: 2 step: 5, loss is 1.0\n"
	   "dptrain: step 200/1100 (18.2%), epoch 2/11, elapsed 0:00:10, ETA 0:01:30\n"
	   "epoch: 11 step: 100, loss is 0.5\n"
	   "dptrain: step 1100/1100 (100.0%), epoch 11/11, elapsed 0:01:40, ETA 0:00:00\n",
	   "lines: each loss line, then rank 0's progress");
	free(s);
	s = written(PROGRESS_AUTO, 1);
	ok(s && strstr(s, "dptrain: step 200/1100") && !strchr(s, '\r'),
	   "auto on a file: lines, no carriage return");
	free(s);
	s = written(PROGRESS_LINES, 0);
	is(s, "epoch: 2 step: 5, loss is 1.0\nepoch: 11 step: 100, loss is 0.5\n",
	   "another rank: its loss lines, no progress");
	free(s);
	s = written(PROGRESS_OFF, 1);
	is(s, "", "off: nothing");
	free(s);
	s = written(PROGRESS_OFF, 0);
	is(s, "", "off on another rank: nothing");
	free(s);
	return done_testing();
}
