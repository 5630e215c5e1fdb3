/* straggler.h — naming a rank (or a node) that holds the others back, from the per-rank
 * timings rank 0 gathers every train.log_every steps. Pure arithmetic: no I/O, no clock, no
 * collectives (trainer/rankwatch.c feeds it and says what it finds).
 *
 * The rule (dptrain-metrics(5) documents it). In synchronous data parallelism every rank's
 * step ends with the same collective, so every rank's wall step time is the same: the slow
 * rank's communication wait is short and the others' is long (they wait for it). A rank is
 * therefore judged by its own work, busy = compute + data wait, against the median of the
 * OTHER ranks' busy times:
 *   - one report is "slow" for a rank when its busy >= threshold x that median;
 *   - a rank is a straggler when the window (the last `window` reports) is full, more than
 *     half of its reports in it are slow, and its mean busy over the window >= threshold x the
 *     median of the others' means (so a single spike, however large, is never named);
 *   - the cause is its largest excess over the others' median: "data" (data wait) or
 *     "compute" (compute time);
 *   - "network": a rank whose own wall step time is >= threshold x the others' median while
 *     its busy is not (its collectives are what takes longer). A network that is slow for
 *     everyone slows every rank alike and is named by no one: it shows as comm_wait_ms.
 * A straggler is named once per episode; the episode ends when none of its last
 * ceil(window / 2) reports was slow, and the next time it is named again. When a rank of a node
 * (two or more ranks there, two or more nodes in the job) is to be named and every rank of that
 * node is over the threshold on its window's means (or already named), one finding names the
 * node instead, and all its ranks are in the episode. */
#ifndef DPTRAIN_STRAGGLER_H
#define DPTRAIN_STRAGGLER_H

/* One rank's figures over one report interval (mean per step, milliseconds). */
struct strag_fig {
	double step_ms;	   /* wall time of a step */
	double compute_ms; /* step_ms - data_ms - comm_ms */
	double data_ms;	   /* waiting for the input pipeline */
	double comm_ms;	   /* waiting for the gradients' allreduce */
};

enum strag_cause { STRAG_COMPUTE, STRAG_DATA, STRAG_NETWORK };

struct strag_finding {
	int rank;	/* the rank (for a node: its slowest rank) */
	int node;	/* node index; -1 when node indices were not given */
	int node_ranks; /* > 0: the whole node (this many ranks) is named, not one rank */
	double slower;	/* its judged time / the others' median (busy, or step for network) */
	double busy_ms; /* its mean compute + data time per step over the window */
	double median_busy_ms; /* the others' median of that */
	double step_ms, median_step_ms;
	enum strag_cause cause;
};

struct straggler {
	int nranks, window;
	double threshold;
	const int *node_of; /* rank -> node index, or NULL */
	int nnodes;
	long reports;		/* fed so far */
	struct strag_fig *ring; /* window x nranks: report (reports - 1 - k) % window at k */
	unsigned char *slow;	/* the same layout: that report was slow for that rank */
	unsigned char *in_episode;
	/* scratch: nranks entries each */
	double *mean, *med, *tmp;
	struct strag_finding *found;
	unsigned char *mark; /* 3 x nranks */
};

/* threshold > 1, window >= 1, nranks >= 1; node_of (nranks entries, may be NULL) is used,
 * not copied. -1 when out of memory. */
int straggler_init(struct straggler *s, int nranks, int window, double threshold,
		   const int *node_of);
void straggler_free(struct straggler *s);
/* One report: figs[nranks]. Returns how many stragglers are newly named (0 while the window
 * is not yet full), their findings in *found (valid until the next call). */
int straggler_feed(struct straggler *s, const struct strag_fig *figs,
		   const struct strag_finding **found);
/* "compute", "data", "network" */
const char *straggler_cause_name(enum strag_cause c);

#endif
