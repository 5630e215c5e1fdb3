/* straggler.c — straggler.h. */
#include "trainer/straggler.h"

#include <stdlib.h>
#include <string.h>

enum { C_BUSY, C_STEP, C_DATA, C_COMPUTE, C_COMM, NCOMP };

int straggler_init(struct straggler *s, int nranks, int window, double threshold,
		   const int *node_of)
{
	memset(s, 0, sizeof(*s));
	if (nranks < 1 || window < 1 || !(threshold > 1))
		return -1;
	s->nranks = nranks;
	s->window = window;
	s->threshold = threshold;
	s->node_of = node_of;
	for (int r = 0; node_of && r < nranks; r++)
		if (node_of[r] + 1 > s->nnodes)
			s->nnodes = node_of[r] + 1;
	size_t n = (size_t)nranks, w = (size_t)window;
	s->ring = calloc(n * w, sizeof(*s->ring));
	s->slow = calloc(n * w, 1);
	s->in_episode = calloc(n, 1);
	s->mean = calloc(n * NCOMP, sizeof(double));
	s->med = calloc(n * NCOMP, sizeof(double));
	s->tmp = calloc(n + 1, sizeof(double));
	s->found = calloc(n, sizeof(*s->found));
	s->mark = calloc(3 * n, 1);
	if (!s->ring || !s->slow || !s->in_episode || !s->mean || !s->med || !s->tmp || !s->found ||
	    !s->mark) {
		straggler_free(s);
		return -1;
	}
	return 0;
}

void straggler_free(struct straggler *s)
{
	free(s->ring);
	free(s->slow);
	free(s->in_episode);
	free(s->mean);
	free(s->med);
	free(s->tmp);
	free(s->found);
	free(s->mark);
	memset(s, 0, sizeof(*s));
}

const char *straggler_cause_name(enum strag_cause c)
{
	return c == STRAG_DATA ? "data" : c == STRAG_NETWORK ? "network" : "compute";
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* out[i]: the median of v[0..n) without v[i], for every i, from one sort (tmp: n scratch). */
static void medians_of_others(const double *v, int n, double *out, double *tmp)
{
	memcpy(tmp, v, (size_t)n * sizeof(double));
	qsort(tmp, (size_t)n, sizeof(double), cmp_double);
	int k = n - 1; /* what is left */
	for (int i = 0; i < n; i++) {
		if (k == 0) {
			out[i] = 0;
			continue;
		}
		/* where v[i] sits (any copy of an equal value leaves the same others) */
		int lo = 0, hi = n - 1;
		while (lo < hi) {
			int mid = (lo + hi) / 2;
			if (tmp[mid] < v[i])
				lo = mid + 1;
			else
				hi = mid;
		}
		int p = lo, a = (k - 1) / 2, b = k / 2;
		double x = tmp[a < p ? a : a + 1], y = tmp[b < p ? b : b + 1];
		out[i] = (x + y) / 2;
	}
}

static double comp(const struct strag_fig *f, int c)
{
	switch (c) {
	case C_BUSY:
		return f->compute_ms + f->data_ms;
	case C_STEP:
		return f->step_ms;
	case C_DATA:
		return f->data_ms;
	case C_COMPUTE:
		return f->compute_ms;
	default:
		return f->comm_ms;
	}
}

/* x >= threshold x m, for a median m of positive times */
static int over(double x, double m, double threshold)
{
	return x > 0 && x >= threshold * m;
}

#define M(r, c)	 s->mean[(size_t)(c)*s->nranks + (r)]
#define MD(r, c) s->med[(size_t)(c)*s->nranks + (r)]

/* how much slower rank r is than the others: its busy time's ratio when that is over the
 * threshold, else its step time's */
static double ratio(const struct straggler *s, int r)
{
	if (!(MD(r, C_BUSY) > 0) || !(MD(r, C_STEP) > 0))
		return 0;
	double b = M(r, C_BUSY) / MD(r, C_BUSY);
	return b >= s->threshold ? b : M(r, C_STEP) / MD(r, C_STEP);
}

static void finding(const struct straggler *s, struct strag_finding *f, int r)
{
	memset(f, 0, sizeof(*f));
	f->rank = r;
	f->node = s->node_of ? s->node_of[r] : -1;
	f->busy_ms = M(r, C_BUSY);
	f->median_busy_ms = MD(r, C_BUSY);
	f->step_ms = M(r, C_STEP);
	f->median_step_ms = MD(r, C_STEP);
	f->slower = ratio(s, r);
	if (over(M(r, C_BUSY), MD(r, C_BUSY), s->threshold))
		f->cause = M(r, C_DATA) - MD(r, C_DATA) > M(r, C_COMPUTE) - MD(r, C_COMPUTE)
			       ? STRAG_DATA
			       : STRAG_COMPUTE;
	else
		f->cause = STRAG_NETWORK;
}

int straggler_feed(struct straggler *s, const struct strag_fig *figs,
		   const struct strag_finding **found)
{
	int n = s->nranks, w = s->window, nf = 0;
	double thr = s->threshold;
	int slot = (int)(s->reports % w);
	*found = s->found;
	memcpy(&s->ring[(size_t)slot * n], figs, (size_t)n * sizeof(*figs));
	s->reports++;
	if (n < 2)
		return 0;

	/* this report: slow for whom (busy, or wall step time, over the others' median) */
	double *v = s->mean, *busy_med = s->med, *step_med = s->med + n;
	for (int c = C_BUSY; c <= C_STEP; c++) {
		for (int r = 0; r < n; r++)
			v[r] = comp(&figs[r], c);
		medians_of_others(v, n, c == C_BUSY ? busy_med : step_med, s->tmp);
	}
	for (int r = 0; r < n; r++)
		s->slow[(size_t)slot * n + r] = over(comp(&figs[r], C_BUSY), busy_med[r], thr) ||
						over(figs[r].step_ms, step_med[r], thr);
	if (s->reports < w)
		return 0;

	/* the window's means, and the others' medians of them */
	for (int c = 0; c < NCOMP; c++) {
		double *m = s->mean + (size_t)c * n;
		for (int r = 0; r < n; r++) {
			double sum = 0;
			for (int k = 0; k < w; k++)
				sum += comp(&s->ring[(size_t)k * n + r], c);
			m[r] = sum / w;
		}
		medians_of_others(m, n, s->med + (size_t)c * n, s->tmp);
	}
	/* each rank: slow on most of the window's reports and on its means (flagged), or on its
	 * means alone (over) */
	int recent = (w + 1) / 2;
	unsigned char *flagged = s->mark, *over_m = s->mark + n;
	for (int r = 0; r < n; r++) {
		int cnt = 0, cnt_recent = 0;
		for (int k = 0; k < w; k++)
			cnt += s->slow[(size_t)k * n + r];
		for (int a = 0; a < recent; a++)
			cnt_recent += s->slow[(size_t)((slot - a + w) % w) * n + r];
		over_m[r] = over(M(r, C_BUSY), MD(r, C_BUSY), thr) ||
			    over(M(r, C_STEP), MD(r, C_STEP), thr);
		flagged[r] = 2 * cnt > w && over_m[r];
		if (s->in_episode[r] && !cnt_recent)
			s->in_episode[r] = 0; /* over: the next time is another episode */
	}
	/* a node whose every rank is over the others at once, one of them newly flagged: the
	 * node is named, once, rather than its ranks one by one */
	unsigned char *seen = s->mark + 2 * n; /* by node */
	memset(seen, 0, (size_t)s->nnodes);
	for (int r0 = 0; s->node_of && s->nnodes >= 2 && r0 < n; r0++) {
		int node = s->node_of[r0], on = 0, all = 1, fresh = 0, worst = r0;
		if (seen[node])
			continue;
		seen[node] = 1;
		for (int r = r0; r < n; r++) {
			if (s->node_of[r] != node)
				continue;
			on++;
			all &= s->in_episode[r] || over_m[r];
			fresh |= flagged[r] && !s->in_episode[r];
			if (ratio(s, r) > ratio(s, worst))
				worst = r;
		}
		if (on < 2 || !all || !fresh)
			continue;
		struct strag_finding *f = &s->found[nf++];
		finding(s, f, worst);
		f->node_ranks = on;
		for (int r = r0; r < n; r++)
			if (s->node_of[r] == node)
				s->in_episode[r] = 1;
	}
	for (int r = 0; r < n; r++) {
		if (s->in_episode[r] || !flagged[r])
			continue;
		s->in_episode[r] = 1;
		finding(s, &s->found[nf++], r);
	}
	return nf;
}
