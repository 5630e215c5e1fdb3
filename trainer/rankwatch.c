/* rankwatch.c — rankwatch.h. */
#define _GNU_SOURCE /* open_memstream */
#include "trainer/rankwatch.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/env.h"
#include "common/error.h"
#include "trainer/dist/comm.h"

enum { F_STEP, F_COMPUTE, F_DATA, F_COMM, F_IPS, F_MIB, RANKWATCH_FIELDS };

/* The node's name as a report shows it: Slurm's name for it (SLURMD_NODENAME: several slurmd
 * on one host are several nodes), else the host name; up to its first dot, other characters
 * than letters, digits, '-' and '_' made '?' (it goes into JSON as it is). */
static void my_host(char *h)
{
	char name[256] = "";
	const char *sn = getenv(ENV_SLURMD_NODENAME);
	if (sn && sn[0])
		snprintf(name, sizeof(name), "%s", sn);
	else if (gethostname(name, sizeof(name) - 1) < 0 || !name[0])
		strcpy(name, "?");
	name[strcspn(name, ".")] = 0;
	name[RANKWATCH_HOST - 1] = 0; /* longer names are cut */
	memcpy(h, name, RANKWATCH_HOST);
	for (char *c = h; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_')
			*c = '?';
}

int rankwatch_open(struct rankwatch *w, struct comm *comm, int rank, int world, int gpu,
		   long log_every, int window, double threshold, struct dp_error *err)
{
	memset(w, 0, sizeof(*w));
	w->comm = comm;
	w->rank = rank;
	w->world = world;
	w->gpu = gpu;
	w->log_every = log_every;
	size_t n = (size_t)world, per = RANKWATCH_HOST + 1;
	w->host = calloc(n, sizeof(*w->host));
	w->gpus = calloc(n, sizeof(int));
	w->node_of = calloc(n, sizeof(int));
	w->buf = calloc(n * (per > RANKWATCH_FIELDS ? per : RANKWATCH_FIELDS), sizeof(double));
	if (!w->host || !w->gpus || !w->node_of || !w->buf) {
		rankwatch_close(w);
		return errprintf(err, "the per-rank figures of %d ranks: out of memory", world);
	}
	/* every rank's node and GPU, once: its slots of a SUM hold its name's bytes and its GPU
	 * (+1, so that 0 is "nothing") */
	char h[RANKWATCH_HOST];
	my_host(h);
	double *mine = w->buf + (size_t)rank * per;
	for (int i = 0; i < RANKWATCH_HOST; i++)
		mine[i] = (unsigned char)h[i];
	mine[RANKWATCH_HOST] = gpu + 1;
	if (comm && comm->ops->allreduce(comm, w->buf, n * per, COMM_F64, COMM_SUM, err) < 0) {
		rankwatch_close(w);
		return errprefix(err, "exchanging the ranks' node names");
	}
	for (int r = 0; r < world; r++) {
		const double *v = w->buf + (size_t)r * per;
		for (int i = 0; i < RANKWATCH_HOST; i++)
			w->host[r][i] = (char)(int)v[i];
		w->host[r][RANKWATCH_HOST - 1] = 0;
		w->gpus[r] = (int)v[RANKWATCH_HOST] - 1;
		int k;
		for (k = 0; k < r && strcmp(w->host[k], w->host[r]) != 0; k++)
			;
		w->node_of[r] = k < r ? w->node_of[k] : w->nnodes++;
	}
	if (rank == 0 && world > 1 && window > 0) {
		if (straggler_init(&w->st, world, window, threshold, w->node_of) < 0) {
			rankwatch_close(w);
			return errprintf(err, "the straggler watch over %d ranks: out of memory",
					 world);
		}
		w->watching = 1;
	}
	return 0;
}

static const char *cause_words(enum strag_cause c)
{
	switch (c) {
	case STRAG_DATA:
		return "waiting on data (its input pipeline: data.workers, its storage)";
	case STRAG_NETWORK:
		return "in its collectives (its network)";
	default:
		return "computing (a busy, throttled or slower CPU or GPU)";
	}
}

static void where(char *buf, size_t n, const struct rankwatch *w, int r)
{
	if (w->gpus[r] >= 0)
		snprintf(buf, n, "node %s, GPU %d", w->host[r], w->gpus[r]);
	else
		snprintf(buf, n, "node %s, cpu", w->host[r]);
}

static void name_straggler(struct rankwatch *w, long step, const struct strag_finding *f,
			   struct metrics *mt, struct progress *pg)
{
	char at[128];
	long steps = (long)w->st.window * w->log_every;
	where(at, sizeof(at), w, f->rank);
	progress_break(pg);
	if (f->node_ranks)
		fprintf(
		    pg->out,
		    "dptrain: node %s (%d ranks, the slowest rank %d) is a straggler: %.2fx the "
		    "median %s time of the other ranks over the last %d reports (%ld steps), %s\n",
		    w->host[f->rank], f->node_ranks, f->rank, f->slower,
		    f->cause == STRAG_NETWORK ? "step" : "compute+data", w->st.window, steps,
		    cause_words(f->cause));
	else
		fprintf(pg->out,
			"dptrain: rank %d (%s) is a straggler: %.2fx the median %s time of the "
			"other ranks over the last %d reports (%ld steps), %s\n",
			f->rank, at, f->slower, f->cause == STRAG_NETWORK ? "step" : "compute+data",
			w->st.window, steps, cause_words(f->cause));
	fflush(pg->out);
	metrics_line(mt,
		     "{\"event\":\"straggler\",\"global_step\":%ld,\"rank\":%d,\"node\":\"%s\","
		     "\"gpu\":%d,\"node_ranks\":%d,\"slower\":%.4f,\"cause\":\"%s\","
		     "\"busy_ms\":%.4f,\"median_busy_ms\":%.4f,\"step_ms\":%.4f,"
		     "\"median_step_ms\":%.4f,\"reports\":%d,\"window\":%ld,\"threshold\":%.4g}",
		     step, f->rank, w->host[f->rank], w->gpus[f->rank], f->node_ranks, f->slower,
		     straggler_cause_name(f->cause), f->busy_ms, f->median_busy_ms, f->step_ms,
		     f->median_step_ms, w->st.window, steps, w->st.threshold);
}

int rankwatch_report(struct rankwatch *w, long global_step, const struct rank_fig *mine,
		     struct metrics *mt, struct progress *pg, struct dp_error *err)
{
	size_t n = (size_t)w->world;
	memset(w->buf, 0, n * RANKWATCH_FIELDS * sizeof(double));
	double *v = w->buf + (size_t)w->rank * RANKWATCH_FIELDS;
	v[F_STEP] = mine->step_ms;
	v[F_COMPUTE] = mine->compute_ms;
	v[F_DATA] = mine->data_wait_ms;
	v[F_COMM] = mine->comm_wait_ms;
	v[F_IPS] = mine->img_per_s;
	v[F_MIB] = mine->device_mib;
	if (w->comm && w->comm->ops->allreduce(w->comm, w->buf, n * RANKWATCH_FIELDS, COMM_F64,
					       COMM_SUM, err) < 0)
		return errprefix(err, "gathering the ranks' timings at step %ld", global_step);
	if (w->rank != 0)
		return 0;
	/* the ranks event: one line, however many ranks (one write, as every line) */
	char *line = NULL;
	size_t len = 0;
	FILE *f = mt->open ? open_memstream(&line, &len) : NULL;
	if (f) {
		fprintf(f, "{\"event\":\"ranks\",\"global_step\":%ld,\"ranks\":[", global_step);
		for (size_t r = 0; r < n; r++) {
			const double *x = w->buf + r * RANKWATCH_FIELDS;
			fprintf(f,
				"%s{\"rank\":%zu,\"node\":\"%s\",\"gpu\":%d,\"step_ms\":%.4f,"
				"\"compute_ms\":%.4f,\"data_wait_ms\":%.4f,\"comm_wait_ms\":%.4f,"
				"\"img_per_s\":%.3f,\"device_mib\":%.0f}",
				r ? "," : "", r, w->host[r], w->gpus[r], x[F_STEP], x[F_COMPUTE],
				x[F_DATA], x[F_COMM], x[F_IPS], x[F_MIB]);
		}
		fputs("]}", f);
		if (fclose(f) == 0 && line)
			metrics_line(mt, "%s", line);
		free(line);
	}
	if (!w->watching)
		return 0;
	struct strag_fig figs[64], *fg = n <= 64 ? figs : malloc(n * sizeof(*fg));
	if (!fg)
		return 0; /* no watch this time rather than no training */
	for (size_t r = 0; r < n; r++) {
		const double *x = w->buf + r * RANKWATCH_FIELDS;
		fg[r] = (struct strag_fig){.step_ms = x[F_STEP],
					   .compute_ms = x[F_COMPUTE],
					   .data_ms = x[F_DATA],
					   .comm_ms = x[F_COMM]};
	}
	const struct strag_finding *found;
	int k = straggler_feed(&w->st, fg, &found);
	for (int i = 0; i < k; i++)
		name_straggler(w, global_step, &found[i], mt, pg);
	if (fg != figs)
		free(fg);
	return 0;
}

int rankwatch_get(const struct rankwatch *w, int rank, struct rank_fig *f)
{
	if (w->rank != 0 || !w->buf || rank < 0 || rank >= w->world)
		return -1;
	const double *x = w->buf + (size_t)rank * RANKWATCH_FIELDS;
	*f = (struct rank_fig){.step_ms = x[F_STEP],
			       .compute_ms = x[F_COMPUTE],
			       .data_wait_ms = x[F_DATA],
			       .comm_wait_ms = x[F_COMM],
			       .img_per_s = x[F_IPS],
			       .device_mib = x[F_MIB]};
	return 0;
}

void rankwatch_close(struct rankwatch *w)
{
	if (w->watching)
		straggler_free(&w->st);
	free(w->host);
	free(w->gpus);
	free(w->node_of);
	free(w->buf);
	memset(w, 0, sizeof(*w));
}
