/* straggler.c (test) — trainer/straggler.c on synthetic per-rank reports shaped as synchronous
 * data parallelism makes them (every rank's wall step time the same; the fast ranks wait in
 * the allreduce for the slow one): balanced and noisy-but-balanced runs name nothing, a rank
 * slow by compute or by data is named with that cause, a slow node as one finding, a spike is
 * not named, an episode is named once and a later one again, the network rule, and the bounds.
 * Owns nothing outside its process. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "trainer/straggler.h"
#include "t/lib/tap.h"

#define MAXR 16

static uint64_t rng = 88172645463325252ULL;
static double noise(double amp) /* uniform in [1 - amp, 1 + amp] */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return 1 - amp + 2 * amp * (double)(rng >> 11) / (double)(1ULL << 53);
}

/* One synchronous report: rank r computes compute[r] ms and waits data[r] ms; the allreduce
 * itself takes net ms; everyone's step ends when the slowest rank's does. */
static void sync_report(struct strag_fig *f, int n, const double *compute, const double *data,
			double net)
{
	double slowest = 0;
	for (int r = 0; r < n; r++)
		if (compute[r] + data[r] > slowest)
			slowest = compute[r] + data[r];
	for (int r = 0; r < n; r++) {
		f[r].compute_ms = compute[r];
		f[r].data_ms = data[r];
		f[r].comm_ms = slowest - compute[r] - data[r] + net;
		f[r].step_ms = slowest + net;
	}
}

/* Feed `reports` reports of n ranks, rank r's compute x cf[r] and data x df[r] (base 100 ms
 * compute, 5 ms data, 20 ms network), each figure jittered by +-amp; returns the number named,
 * the last finding in *last. */
static int run(struct straggler *s, int n, int reports, const double *cf, const double *df,
	       double amp, struct strag_finding *last, int *first_at)
{
	int named = 0;
	for (int t = 0; t < reports; t++) {
		double c[MAXR], d[MAXR];
		struct strag_fig f[MAXR];
		for (int r = 0; r < n; r++) {
			c[r] = 100 * (cf ? cf[r] : 1) * noise(amp);
			d[r] = 5 * (df ? df[r] : 1) * noise(amp);
		}
		sync_report(f, n, c, d, 20 * noise(amp));
		const struct strag_finding *got;
		int k = straggler_feed(s, f, &got);
		if (k && first_at && !named)
			*first_at = t + 1;
		named += k;
		if (k && last)
			*last = got[k - 1];
	}
	return named;
}

static void balanced(void)
{
	struct straggler s;
	ok(straggler_init(&s, 4, 8, 1.25, NULL) == 0, "init: 4 ranks, window 8, threshold 1.25");
	is_int(run(&s, 4, 200, NULL, NULL, 0, NULL, NULL), 0, "balanced: nothing named");
	straggler_free(&s);
	/* every figure +-20%: single reports cross 1.25x now and then, windows do not */
	straggler_init(&s, 8, 8, 1.25, NULL);
	is_int(run(&s, 8, 2000, NULL, NULL, 0.2, NULL, NULL), 0,
	       "noisy but balanced (+-20%%, 8 ranks, 2000 reports): nothing named");
	straggler_free(&s);
}

static void slow_compute(void)
{
	struct straggler s;
	struct strag_finding f = {0};
	int at = 0;
	double cf[4] = {1, 1, 1.8, 1};
	straggler_init(&s, 4, 8, 1.25, NULL);
	is_int(run(&s, 4, 7, cf, NULL, 0.05, &f, NULL), 0, "nothing before the window is full");
	is_int(run(&s, 4, 50, cf, NULL, 0.05, &f, &at), 1, "rank 2 slow by compute: named once");
	is_int(at, 1, "at the report that fills the window");
	is_int(f.rank, 2, "the slow rank, not the ranks that wait for it");
	is(straggler_cause_name(f.cause), "compute", "cause compute");
	ok(f.slower > 1.6 && f.slower < 2.0, "1.8x the others' busy time (%.2f)", f.slower);
	ok(fabs(f.step_ms - f.median_step_ms) < 0.2 * f.step_ms,
	   "its wall step time is the others' (synchronous): %.1f vs %.1f", f.step_ms,
	   f.median_step_ms);
	is_int(f.node_ranks, 0, "a rank, not a node");
	straggler_free(&s);
}

static void slow_data(void)
{
	struct straggler s;
	struct strag_finding f = {0};
	double df[3] = {1, 12, 1}; /* rank 1 waits 60 ms for its input instead of 5 */
	straggler_init(&s, 3, 6, 1.25, NULL);
	is_int(run(&s, 3, 40, NULL, df, 0.05, &f, NULL), 1, "rank 1 waiting on data: named once");
	is_int(f.rank, 1, "rank 1");
	is(straggler_cause_name(f.cause), "data", "cause data");
	straggler_free(&s);
}

static void slow_node(void)
{
	struct straggler s;
	struct strag_finding f = {0};
	int node_of[6] = {0, 0, 1, 1, 2, 2};
	double cf[6] = {1, 1, 1.6, 1.7, 1, 1};
	straggler_init(&s, 6, 8, 1.25, node_of);
	is_int(run(&s, 6, 40, cf, NULL, 0.05, &f, NULL), 1, "a slow node: one finding");
	is_int(f.node, 1, "node 1");
	is_int(f.node_ranks, 2, "its 2 ranks");
	is_int(f.rank, 3, "its slowest rank");
	straggler_free(&s);
	/* the node's second rank slows down 4 reports after the first: still one finding, the
	 * node's, when the first is named */
	double late[6] = {1, 1, 1.8, 1, 1, 1}, both[6] = {1, 1, 1.8, 1.7, 1, 1};
	straggler_init(&s, 6, 8, 1.25, node_of);
	int k = run(&s, 6, 4, late, NULL, 0.02, &f, NULL);
	k += run(&s, 6, 40, both, NULL, 0.02, &f, NULL);
	is_int(k, 1, "ranks of a node slowing down at different reports: one finding");
	ok(f.node == 1 && f.node_ranks == 2, "the node (node %d, %d ranks)", f.node, f.node_ranks);
	straggler_free(&s);
	/* one slow rank on a node of two: the rank, not the node */
	double cg[6] = {1, 1, 1, 1.7, 1, 1};
	straggler_init(&s, 6, 8, 1.25, node_of);
	is_int(run(&s, 6, 40, cg, NULL, 0.05, &f, NULL), 1, "one slow rank of a node: named");
	ok(f.rank == 3 && f.node == 1 && f.node_ranks == 0, "rank 3 on node 1, alone");
	straggler_free(&s);
}

static void spike(void)
{
	struct straggler s;
	double one[4] = {1, 1, 1, 1}, big[4] = {1, 1, 1, 10};
	straggler_init(&s, 4, 8, 1.25, NULL);
	int named = run(&s, 4, 20, one, NULL, 0.05, NULL, NULL);
	named += run(&s, 4, 1, big, NULL, 0, NULL, NULL); /* a 10x spike on rank 3 */
	named += run(&s, 4, 2, one, NULL, 0.05, NULL, NULL);
	named += run(&s, 4, 1, big, NULL, 0, NULL, NULL); /* and another */
	named += run(&s, 4, 30, one, NULL, 0.05, NULL, NULL);
	is_int(named, 0, "transient spikes (10x, twice in a window): not named");
	straggler_free(&s);
}

static void episodes(void)
{
	struct straggler s;
	double one[4] = {1, 1, 1, 1}, slow[4] = {1, 2, 1, 1};
	straggler_init(&s, 4, 8, 1.25, NULL);
	int a = run(&s, 4, 100, slow, NULL, 0.05, NULL, NULL);
	int b = run(&s, 4, 30, one, NULL, 0.05, NULL, NULL);
	int c = run(&s, 4, 100, slow, NULL, 0.05, NULL, NULL);
	is_int(a, 1, "a straggler for 100 reports: named once");
	is_int(b, 0, "recovered: nothing");
	is_int(c, 1, "slow again: a new episode, named again");
	straggler_free(&s);
}

static void network(void)
{
	struct straggler s;
	const struct strag_finding *got = NULL;
	int k = 0;
	straggler_init(&s, 3, 4, 1.25, NULL);
	/* rank 0's collectives take 80 ms more than the others' (its steps are longer by that,
	 * its compute and data the same) */
	for (int t = 0; t < 10; t++) {
		struct strag_fig f[3];
		for (int r = 0; r < 3; r++)
			f[r] = (struct strag_fig){
			    .compute_ms = 100, .data_ms = 5, .comm_ms = 20, .step_ms = 125};
		f[0].comm_ms += 80;
		f[0].step_ms += 80;
		k += straggler_feed(&s, f, &got);
		if (k)
			break;
	}
	is_int(k, 1, "longer collectives on one rank alone: named");
	ok(got && got[0].rank == 0 && got[0].cause == STRAG_NETWORK, "rank 0, cause network");
	straggler_free(&s);
	/* everyone's network slow alike: nobody */
	straggler_init(&s, 3, 4, 1.25, NULL);
	k = 0;
	for (int t = 0; t < 10; t++) {
		struct strag_fig f[3];
		for (int r = 0; r < 3; r++)
			f[r] = (struct strag_fig){
			    .compute_ms = 100, .data_ms = 5, .comm_ms = 300, .step_ms = 405};
		k += straggler_feed(&s, f, &got);
	}
	is_int(k, 0, "a network slow for everyone: no rank named");
	straggler_free(&s);
}

static void bounds(void)
{
	struct straggler s;
	ok(straggler_init(&s, 4, 8, 1.0, NULL) < 0, "threshold 1 refused");
	ok(straggler_init(&s, 4, 0, 1.25, NULL) < 0, "window 0 refused");
	/* window 1: every report judged alone (train.straggler_window=1) */
	double w1[4] = {1, 1, 1, 2};
	struct strag_finding f1 = {0};
	straggler_init(&s, 4, 1, 1.25, NULL);
	is_int(run(&s, 4, 10, w1, NULL, 0.02, &f1, NULL), 1, "window 1: named at once, once");
	is_int(f1.rank, 3, "rank 3");
	straggler_free(&s);
	ok(straggler_init(&s, 0, 8, 1.25, NULL) < 0, "no ranks refused");
	straggler_init(&s, 1, 2, 1.25, NULL);
	double cf[1] = {5};
	is_int(run(&s, 1, 20, cf, NULL, 0.3, NULL, NULL), 0, "one rank: never a straggler");
	straggler_free(&s);
	/* two ranks: each judged against the other */
	double two[2] = {1, 1.5};
	struct strag_finding f = {0};
	straggler_init(&s, 2, 4, 1.25, NULL);
	is_int(run(&s, 2, 20, two, NULL, 0.02, &f, NULL), 1, "two ranks: the slow one named");
	is_int(f.rank, 1, "rank 1");
	straggler_free(&s);
	/* all zero (no steps timed): nothing, no division by zero */
	straggler_init(&s, 3, 2, 1.25, NULL);
	struct strag_fig z[3] = {{0}};
	const struct strag_finding *got;
	int k = 0;
	for (int t = 0; t < 5; t++)
		k += straggler_feed(&s, z, &got);
	is_int(k, 0, "zero figures: nothing");
	straggler_free(&s);
}

int main(void)
{
	balanced();
	slow_compute();
	slow_data();
	slow_node();
	spike();
	episodes();
	network();
	bounds();
	return done_testing();
}
