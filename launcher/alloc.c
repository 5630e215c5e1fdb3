/* alloc.c — allocation discovery: picks the source (PMIx, SLURM_*, torchrun-style env),
 * applies a user's MASTER_ADDR/MASTER_PORT, checks GPU sharing, builds the rank table, and the
 * second meeting point before exec. The sources live in alloc_pmix.c, alloc_env.c and
 * alloc_store.c; what they share in alloc_common.c. */
#define _GNU_SOURCE /* qsort_r, pipe2, mkostemp */
#include "launcher/alloc_source.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/error.h"
#include "common/slurm_step.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *alloc_source_name(enum alloc_source s)
{
	switch (s) {
	case ALLOC_SRC_PMIX:
		return "pmix";
	case ALLOC_SRC_SLURM:
		return "slurm";
	case ALLOC_SRC_ENV:
		return "env";
	case ALLOC_SRC_AUTO:
		break;
	}
	return "auto";
}

int alloc_source_from_name(const char *name, enum alloc_source *out)
{
	static const enum alloc_source all[] = {ALLOC_SRC_AUTO, ALLOC_SRC_PMIX, ALLOC_SRC_SLURM,
						ALLOC_SRC_ENV};
	size_t i;

	if (!name || !*name) {
		*out = ALLOC_SRC_AUTO;
		return 0;
	}
	for (i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (strcmp(name, alloc_source_name(all[i])) == 0) {
			*out = all[i];
			return 0;
		}
	return -1;
}

int alloc_user_master_addr(char addr[RT_HOST_MAX], struct dp_error *err)
{
	const char *s = getenv(ENV_MASTER_ADDR);
	const char *p;

	if (!s)
		return 0;
	if (!*s || strlen(s) >= RT_ADDR_MAX) {
		errprintf(err, "MASTER_ADDR='%s' is %s; unset it or give an address", s,
			  *s ? "too long" : "empty");
		return -1;
	}
	for (p = s; *p; p++)
		if (*p <= ' ' || *p == 0x7f) {
			errprintf(err, "MASTER_ADDR='%s' contains a blank or control character", s);
			return -1;
		}
	snprintf(addr, RT_HOST_MAX, "%s", s);
	return 1;
}

int alloc_user_master_port(int *port, struct dp_error *err)
{
	const char *s = getenv(ENV_MASTER_PORT);

	if (!s)
		return 0;
	return alloc_port_parse(s, ENV_MASTER_PORT, port, err) == 0 ? 1 : -1;
}

/* dptrain-run's id, else Slurm's, else dflt; one too long for RT_ID_MAX is passed over. */
static void id_from_env(char out[RT_ID_MAX], const char *first, const char *slurm, const char *dflt)
{
	const char *s = getenv(first);

	if (!s || !*s || strlen(s) >= RT_ID_MAX)
		s = slurm;
	if (!s || strlen(s) >= RT_ID_MAX)
		s = dflt;
	snprintf(out, RT_ID_MAX, "%s", s);
}

void alloc_job_ids(char job[RT_ID_MAX], char step[RT_ID_MAX])
{
	struct dp_slurm_step ss;

	dp_slurm_step_read(&ss);
	id_from_env(job, ENV_DPTRAIN_JOB_ID, ss.job_id.value, "local");
	id_from_env(step, ENV_DPTRAIN_STEP_ID, ss.step_id.value, "0");
}

static int by_node_local(const void *x, const void *y, void *ctx)
{
	const struct alloc_rank *ranks = ctx;
	const struct alloc_rank *p = &ranks[*(const int *)x], *q = &ranks[*(const int *)y];

	if (p->node_rank != q->node_rank)
		return p->node_rank < q->node_rank ? -1 : 1;
	if (p->local_rank != q->local_rank)
		return p->local_rank < q->local_rank ? -1 : 1;
	return *(const int *)x - *(const int *)y;
}

static int by_host(const void *x, const void *y, void *ctx)
{
	const struct alloc_rank *ranks = ctx;
	return strcmp(ranks[*(const int *)x].host, ranks[*(const int *)y].host);
}

static int by_node_gpu(const void *x, const void *y, void *ctx)
{
	const struct alloc_rank *ranks = ctx;
	const struct alloc_rank *p = &ranks[*(const int *)x], *q = &ranks[*(const int *)y];
	int c;

	if (p->node_rank != q->node_rank)
		return p->node_rank < q->node_rank ? -1 : 1;
	c = strcmp(p->gpu.id, q->gpu.id);
	return c ? c : *(const int *)x - *(const int *)y;
}

/* Layout sanity every source must meet: node ranks 0..node_count-1 with one host each, local
 * ranks of a node 0..n-1 each once. A violation is a bug in whatever told us. Sorting keeps
 * this O(n log n) for large jobs. */
static int check_layout(struct alloc *a, struct dp_error *err)
{
	int n = a->world_size, r, k, nodes = 0, rv = -1;
	int *first = NULL, *order = NULL, *count = NULL;

	for (r = 0; r < n; r++) {
		const struct alloc_rank *x = &a->ranks[r];
		if (x->node_rank < 0 || x->node_rank >= n || x->local_rank < 0 ||
		    x->local_rank >= n) {
			errprintf(err, "rank %d: node rank %d / local rank %d out of range", r,
				  x->node_rank, x->local_rank);
			goto out;
		}
		if (x->node_rank + 1 > nodes)
			nodes = x->node_rank + 1;
	}
	first = malloc((size_t)nodes * sizeof(int));
	count = calloc((size_t)nodes, sizeof(int));
	order = malloc((size_t)n * sizeof(int));
	if (!first || !count || !order) {
		errprintf(err, "out of memory for %d ranks", n);
		goto out;
	}
	for (k = 0; k < nodes; k++)
		first[k] = -1;
	for (r = 0; r < n; r++) {
		const struct alloc_rank *x = &a->ranks[r];
		count[x->node_rank]++;
		if (first[x->node_rank] < 0) {
			first[x->node_rank] = r;
		} else if (strcmp(x->host, a->ranks[first[x->node_rank]].host) != 0) {
			errprintf(err,
				  "ranks %d and %d are both on node %d but on hosts %s "
				  "and %s",
				  first[x->node_rank], r, x->node_rank,
				  a->ranks[first[x->node_rank]].host, x->host);
			goto out;
		}
	}
	for (k = 0; k < nodes; k++)
		if (first[k] < 0) {
			errprintf(err, "no rank on node %d of %d", k, nodes);
			goto out;
		}
	memcpy(order, first, (size_t)nodes * sizeof(int));
	qsort_r(order, (size_t)nodes, sizeof(int), by_host, a->ranks);
	for (k = 1; k < nodes; k++)
		if (strcmp(a->ranks[order[k - 1]].host, a->ranks[order[k]].host) == 0) {
			errprintf(err, "nodes %d and %d are both host %s",
				  a->ranks[order[k - 1]].node_rank, a->ranks[order[k]].node_rank,
				  a->ranks[order[k]].host);
			goto out;
		}
	for (r = 0; r < n; r++)
		order[r] = r;
	qsort_r(order, (size_t)n, sizeof(int), by_node_local, a->ranks);
	for (r = 0; r < n; r++) {
		const struct alloc_rank *x = &a->ranks[order[r]];
		if (r > 0 && x->node_rank == a->ranks[order[r - 1]].node_rank &&
		    x->local_rank == a->ranks[order[r - 1]].local_rank) {
			errprintf(err, "ranks %d and %d both claim local rank %d on %s",
				  order[r - 1], order[r], x->local_rank, x->host);
			goto out;
		}
		if (x->local_rank >= count[x->node_rank]) {
			errprintf(err, "rank %d has local rank %d but %s holds %d ranks", order[r],
				  x->local_rank, x->host, count[x->node_rank]);
			goto out;
		}
	}
	a->node_count = nodes;
	a->node_rank = a->ranks[a->rank].node_rank;
	a->local_rank = a->ranks[a->rank].local_rank;
	a->local_size = count[a->node_rank];
	rv = 0;
out:
	free(first);
	free(count);
	free(order);
	return rv;
}

int alloc_check_shared_gpu(const struct alloc *a, int allow, struct dp_error *err)
{
	int *order = NULL, n = 0, r, rv = -1;

	if (allow)
		return 0;
	order = malloc((size_t)a->world_size * sizeof(int));
	if (!order) {
		errprintf(err, "out of memory for %d ranks", a->world_size);
		return -1;
	}
	for (r = 0; r < a->world_size; r++)
		if (a->ranks[r].gpu.index >= 0 && a->ranks[r].gpu.id[0])
			order[n++] = r;
	qsort_r(order, (size_t)n, sizeof(int), by_node_gpu, a->ranks);
	for (r = 1; r < n; r++) {
		const struct alloc_rank *x = &a->ranks[order[r - 1]], *y = &a->ranks[order[r]];
		if (x->node_rank != y->node_rank || strcmp(x->gpu.id, y->gpu.id) != 0)
			continue;
		errprintf(
		    err,
		    "ranks %d and %d on %s would share GPU '%s' (from CUDA_VISIBLE_DEVICES); "
		    "give every rank its own GPU (e.g. --gpus-per-task=1, or as many ranks as "
		    "GPUs) or set device.allow_shared_gpu in the config",
		    order[r - 1], order[r], x->host, x->gpu.id);
		goto out;
	}
	rv = 0;
out:
	free(order);
	return rv;
}

int alloc_gpu_advice(const struct alloc *a, char *self, size_t self_len, char *all, size_t all_len)
{
	const struct alloc_rank *me = &a->ranks[a->rank];
	const char *cvd = getenv(ENV_CUDA_VISIBLE_DEVICES);
	char list[256];
	int *off = NULL, n = 0, r;

	self[0] = all[0] = '\0';
	if (me->gpu.index >= 0 && me->gpu.index != a->local_rank)
		snprintf(self, self_len,
			 "LOCAL_RANK is %d but this rank sees %d GPU%s (CUDA_VISIBLE_DEVICES=%s): "
			 "torch.cuda.set_device(LOCAL_RANK) names a device it does not have; "
			 "use DPTRAIN_GPU (%d here) or LOCAL_RANK %% torch.cuda.device_count()",
			 a->local_rank, me->gpu.count, me->gpu.count == 1 ? "" : "s",
			 cvd ? cvd : "", me->gpu.index);
	if (a->rank != 0)
		return 0;
	off = malloc((size_t)a->world_size * sizeof(*off));
	if (!off)
		return -1;
	/* A rank's choice is LOCAL_RANK modulo what it sees: another index means fewer GPUs. */
	for (r = 0; r < a->world_size; r++)
		if (a->ranks[r].gpu.index >= 0 && a->ranks[r].gpu.index != a->ranks[r].local_rank)
			off[n++] = r;
	if (n > 0) {
		alloc_format_ranks(off, n, list, sizeof(list));
		snprintf(all, all_len,
			 "%s %s %s a LOCAL_RANK at or above the number of GPUs %s (rank %d "
			 "sees %d; Slurm gives each task GPUs of its own under --gpus-per-task "
			 "and --gpu-bind): torch.cuda.set_device(LOCAL_RANK) fails there; use "
			 "DPTRAIN_GPU (each rank's device among those it sees) or LOCAL_RANK %% "
			 "torch.cuda.device_count(); their train.log says more",
			 n == 1 ? "rank" : "ranks", list, n == 1 ? "has" : "have",
			 n == 1 ? "it sees" : "they see", off[0], a->ranks[off[0]].gpu.count);
	}
	free(off);
	return 0;
}

int alloc_discover(struct alloc *a, const struct alloc_opts *o, struct dp_error *err)
{
	enum alloc_source src = o->source;
	struct dp_slurm_step ss;
	int rv = -1, have_port = 0;

	memset(a, 0, sizeof(*a));
	err->text[0] = '\0';
	/* A user's choice is read first so a typo fails before any rank waits on another. */
	if (alloc_user_master_addr(a->master_addr, err) < 0)
		goto out;
	have_port = alloc_user_master_port(&a->master_port, err);
	if (have_port < 0)
		goto out;
	alloc_job_ids(a->job_id, a->step_id);

	if (src == ALLOC_SRC_AUTO) {
		dp_slurm_step_read(&ss);
		if (alloc_pmix_present())
			src = ALLOC_SRC_PMIX;
		else if (ss.procid.value && ss.in_step)
			src = ALLOC_SRC_SLURM;
		else if (getenv(ENV_RANK) && getenv(ENV_WORLD_SIZE))
			src = ALLOC_SRC_ENV;
		else {
			errprintf(
			    err,
			    "no allocation found: no PMIx server (PMIX_RANK unset), not a "
			    "Slurm step (SLURM_PROCID unset) and no RANK/WORLD_SIZE; run under "
			    "srun or dptrain-run, or set RANK, WORLD_SIZE, MASTER_ADDR and "
			    "MASTER_PORT");
			goto out;
		}
	}
	a->source = src;
	switch (src) {
	case ALLOC_SRC_PMIX:
		rv = alloc_from_pmix(a, o, err);
		break;
	case ALLOC_SRC_SLURM:
		rv = alloc_from_slurm(a, o, err);
		break;
	case ALLOC_SRC_ENV:
		rv = alloc_from_env(a, o, err);
		break;
	case ALLOC_SRC_AUTO:
		break;
	}
	if (rv != 0)
		goto out;
	rv = -1;
	if (check_layout(a, err) != 0)
		goto out;
	if (!a->master_addr[0] || a->master_port <= 0) {
		errprintf(err,
			  "no master endpoint (source %s); set MASTER_ADDR and "
			  "MASTER_PORT",
			  alloc_source_name(src));
		goto out;
	}
	if (alloc_check_shared_gpu(a, o->allow_shared_gpu, err) != 0)
		goto out;
	a->timeout_s = o->timeout_s;
	rv = 0;
out:
	return rv;
}

/* What local ranks other than 0 compare before they trust the table on disk: what every
 * node agrees on (world, master) and the layout of our own node. Addresses and GPUs of other
 * ranks are not compared: without PMIx a rank knows only its own. */
static int table_matches(const struct ranktable *got, const struct ranktable *want,
			 const struct alloc *a)
{
	int r;

	if (got->world_size != want->world_size || got->master_port != want->master_port ||
	    strcmp(got->master_addr, want->master_addr) != 0)
		return 0;
	for (r = 0; r < want->world_size; r++) {
		const struct rt_rank *g = &got->ranks[r], *w = &want->ranks[r];
		if (a->ranks[r].node_rank != a->node_rank)
			continue;
		if (strcmp(g->host, w->host) != 0 || g->node_rank != w->node_rank ||
		    g->local_rank != w->local_rank)
			return 0;
	}
	return 1;
}

int alloc_meet(struct alloc *a, const struct alloc_opts *o, struct dp_error *err)
{
	if (a->source == ALLOC_SRC_SLURM) {
		alloc_stall(o, a->rank, "before joining the launchers' store");
		return alloc_store_open(a, o, err);
	}
	/* without PMIx, the only meeting point is the rank table local rank 0 writes next */
	if (!a->pmix)
		alloc_stall(o, a->rank, "before writing its rank table");
	return 0;
}

int alloc_gate(struct alloc *a, int timeout_s, struct dp_error *err)
{
	if (a->pmix)
		return alloc_pmix_gate(a, timeout_s, err);
	if (a->store)
		return alloc_store_gate(a, timeout_s, err);
	return 0;
}

int alloc_write_table(struct alloc *a, const struct ranktable *rt, const char *path,
		      struct dp_error *err)
{
	if (a->store)
		return alloc_store_write_table(a, rt, path, a->timeout_s, err);
	if (a->local_rank != 0)
		return 0;
	return alloc_table_write(rt, path, err);
}

int alloc_sync(struct alloc *a, const char *rank_table, const struct ranktable *expect,
	       int timeout_s, struct dp_error *err)
{
	struct ranktable got;
	struct dp_error rterr;
	double deadline;
	int r, writer = -1;

	if (a->pmix)
		return alloc_pmix_sync(a, timeout_s, err);
	if (a->store)
		return alloc_store_sync(a, timeout_s, err);
	if (a->local_rank == 0)
		return 0;
	for (r = 0; r < a->world_size; r++)
		if (a->ranks[r].node_rank == a->node_rank && a->ranks[r].local_rank == 0)
			writer = r;
	deadline = now_s() + timeout_s;
	rterr.text[0] = '\0';
	for (;;) {
		memset(&got, 0, sizeof(got));
		if (rt_read(&got, rank_table, &rterr) == 0) {
			int same = table_matches(&got, expect, a);
			rt_free(&got);
			if (same)
				return 0;
			errprintf(&rterr, "it holds another step's table");
		}
		if (now_s() >= deadline)
			break;
		usleep(20000);
	}
	errprintf(err,
		  "rank %d (local rank 0 on %s) did not write %s within %d s (last: %s); see its "
		  "messages",
		  writer, a->ranks[a->rank].host, rank_table, timeout_s, rterr.text);
	return -1;
}

void alloc_finish(struct alloc *a)
{
	if (a->pmix)
		alloc_pmix_finish(a);
	if (a->store)
		alloc_store_finish(a, a->timeout_s);
}

int alloc_abort(struct alloc *a, int status, const char *msg, struct dp_error *err)
{
	if (a->store) {
		alloc_store_abort(a, msg);
		return 0;
	}
	return alloc_pmix_abort(a, status, msg, err);
}

void alloc_free(struct alloc *a)
{
	free(a->ranks);
	free(a->pmix); /* PMIx holds no pointer into it; the session stays as it was */
	memset(a, 0, sizeof(*a));
}

int alloc_rank_table(const struct alloc *a, struct ranktable *rt, struct dp_error *err)
{
	struct rt_alloc_rank *ranks;
	struct rt_alloc ra;
	struct dp_error rterr;
	int r, rv = -1;

	ranks = calloc((size_t)a->world_size, sizeof(*ranks));
	if (!ranks) {
		errprintf(err, "out of memory for %d ranks", a->world_size);
		return -1;
	}
	for (r = 0; r < a->world_size; r++) {
		ranks[r].host = a->ranks[r].host;
		ranks[r].addr = a->ranks[r].addr;
		ranks[r].device_ip = a->ranks[r].device_ip;
		ranks[r].node_rank = a->ranks[r].node_rank;
		ranks[r].local_rank = a->ranks[r].local_rank;
		ranks[r].gpu = a->ranks[r].gpu.index;
	}
	memset(&ra, 0, sizeof(ra));
	ra.world_size = a->world_size;
	ra.master_addr = a->master_addr;
	ra.master_port = a->master_port;
	ra.job_id = a->job_id;
	ra.step_id = a->step_id;
	ra.ranks = ranks;
	rterr.text[0] = '\0';
	if (rt_build(rt, &ra, &rterr) != 0) {
		errprintf(err, "cannot build the rank table: %s", rterr.text);
		goto out;
	}
	rv = 0;
out:
	free(ranks);
	return rv;
}
