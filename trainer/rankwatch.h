/* rankwatch.h — every rank's timings at rank 0, while the job runs. Every train.log_every
 * steps each rank puts its own figures (step time split into compute, data wait and
 * communication wait, img/s, device memory) in its slots of a world-sized vector and one
 * allreduce (SUM) brings them all to rank 0, which writes the "ranks" event and feeds
 * straggler.h, naming a straggler on its output and in a "straggler" event. Nothing here is
 * timed on the step's path: the figures are the sums the loop keeps anyway. */
#ifndef DPTRAIN_RANKWATCH_H
#define DPTRAIN_RANKWATCH_H

#include <stdio.h>

#include "common/error.h"
#include "trainer/metrics.h"
#include "trainer/progress.h"
#include "trainer/straggler.h"

struct comm;

/* One rank's figures over a report interval. */
struct rank_fig {
	double step_ms, compute_ms, data_wait_ms, comm_wait_ms; /* means per step */
	double img_per_s;					/* its images over its step time */
	double device_mib; /* GPU: the most device memory held so far; 0 on the CPU */
};

#define RANKWATCH_HOST 64

struct rankwatch {
	int rank, world, gpu;
	struct comm *comm;	      /* NULL: one rank */
	long log_every;		      /* steps per report */
	char (*host)[RANKWATCH_HOST]; /* every rank's node (short host name) */
	int *gpus;		      /* every rank's GPU, -1: CPU */
	int *node_of; /* every rank's node index, in order of the first rank on it */
	int nnodes;
	double *buf;	     /* world x RANKWATCH_FIELDS */
	struct straggler st; /* rank 0, world > 1, straggler_window > 0 */
	int watching;
};

/* Collective (every rank calls it): learns every rank's node and GPU. window 0: no straggler
 * watch. -1 with err when out of memory or the collective fails. */
int rankwatch_open(struct rankwatch *w, struct comm *comm, int rank, int world, int gpu,
		   long log_every, int window, double threshold, struct dp_error *err);
/* Collective, at each report: mine is this rank's; rank 0 writes the ranks event (and any
 * straggler's) to mt and names a straggler on pg's output. */
int rankwatch_report(struct rankwatch *w, long global_step, const struct rank_fig *mine,
		     struct metrics *mt, struct progress *pg, struct dp_error *err);
/* Rank 0, after a report: rank's figures in it (0), or -1 (another rank, or no report yet). */
int rankwatch_get(const struct rankwatch *w, int rank, struct rank_fig *f);
void rankwatch_close(struct rankwatch *w);

#endif
