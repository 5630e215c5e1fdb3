/* progress.h — the training's lines on a rank's output (its console and train.log): where the
 * outputs go, the loss lines every train.log_every steps, and rank 0's progress (step of
 * total, elapsed, ETA). output.progress (dptrain.json(5)) or dptrain --quiet chooses:
 *   auto   rank 0 redraws one line in place (\r) when its output is a terminal, else as lines
 *   lines  plain lines: each loss line, then on rank 0 a progress line
 *   off    no loss nor progress lines (metrics.jsonl still has them); other lines stay
 * Ranks other than 0 print their own loss lines, never the progress. */
#ifndef DPTRAIN_PROGRESS_H
#define DPTRAIN_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

enum progress_mode { PROGRESS_AUTO, PROGRESS_LINES, PROGRESS_OFF };

struct progress {
	FILE *out;
	int rank0;
	int quiet; /* output.progress off */
	int tty;   /* rank 0's output is a terminal (auto): one line, redrawn */
	int open;  /* that line is on the screen, without its newline */
	long step0, total;
	double t0;
};

/* step0: the step training starts from (a resumed run's); total: the last step; t0: now. */
void progress_init(struct progress *p, FILE *out, enum progress_mode mode, int rank0, long step0,
		   long total, double t0);
/* Seconds to the last step at the rate since t0; -1 before a step is done. */
double progress_eta(const struct progress *p, long step, double now);
/* A loss line (without its newline) at global step `step` of epoch `epoch` of `epochs`. */
void progress_loss(struct progress *p, const char *line, int epoch, int epochs, long step,
		   double now);
/* Rank 0's first line: where the outputs go. */
void progress_where(FILE *out, const char *dir, int metrics);
/* Before any other line on p->out: ends a redrawn line. */
void progress_break(struct progress *p);
/* s as H:MM:SS (or "?" when s < 0) */
void progress_duration(char *buf, size_t n, double s);

#endif
