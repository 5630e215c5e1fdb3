/* alloc_store.c — the wire-up without PMIx (srun --mpi=none or --mpi=pmi2: the SLURM_*
 * source). SLURM_* tell every rank where each rank runs, but a rank knows only its own address
 * and GPU; so the ranks meet in a rendezvous store (store/store.c, the one the trainer
 * uses) that rank 0's launcher runs at MASTER_ADDR:MASTER_PORT until the command starts:
 *
 *   open   every rank publishes its record; rank 0 gathers them and publishes the whole list,
 *          which every node's local rank 0 (the node's table writer) reads: the table is
 *          complete, with every rank's own address and GPU, never one node's guess.
 *   gate   no rank writes into the output directory before rank 0 holds it.
 *   table  rank 0 writes rank_table.json; then every other node's writer writes its copy only
 *          where that file does not already hold the same table (a node-local directory), so
 *          a shared directory has one writer.
 *   sync   a barrier: no rank starts its command before every table is written.
 *   finish goodbye; rank 0's server stops, and the port is free for the command's own store.
 *
 * A failing rank tells every other one at once (store_abort), as PMIx_Abort does. With a
 * secret (DPTRAIN_STORE_SECRET, made per step by the plugin) a stranger is refused and logged;
 * without one the store is open to whoever reaches the port, like torchrun's. */
#include "common/error.h"
#include "common/env.h"
#include "launcher/alloc_source.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_RECORD  "dptrain.launch.rank."   /* + rank: the rank's record */
#define KEY_RECORDS "dptrain.launch.records" /* every record, one per line, by rank */
#define KEY_GATE    "dptrain.launch.gate"    /* rank 0 holds the output directory */
#define KEY_TABLE   "dptrain.launch.table"   /* rank 0 has written its rank table */

static struct store *st_of(struct alloc *a)
{
	return (struct store *)a->store;
}

/* Rank 0: every rank's record, joined by newlines in rank order; asked for all at once (one
 * round trip to the store, not one per rank). */
static char *gather_records(struct alloc *a, int timeout_s, struct dp_error *err)
{
	size_t n = (size_t)a->world_size, used = 0, total = 0;
	char **keys = calloc(n, sizeof(*keys)), *names = malloc(n * 40), *all = NULL;
	void **v = calloc(n, sizeof(*v));
	size_t *len = calloc(n, sizeof(*len));
	size_t r;

	if (!keys || !names || !v || !len) {
		errprintf(err, "out of memory for %d ranks' records", a->world_size);
		goto out;
	}
	for (r = 0; r < n; r++) {
		keys[r] = names + 40 * r;
		snprintf(keys[r], 40, KEY_RECORD "%d", (int)r);
	}
	if (store_get_many(st_of(a), (const char *const *)keys, n, v, len, timeout_s, err) != 0)
		goto out;
	for (r = 0; r < n; r++) {
		if (len[r] == 0 || len[r] >= ALLOC_RECORD_MAX || memchr(v[r], '\n', len[r])) {
			errprintf(err, "rank %zu published a malformed record", r);
			goto out;
		}
		total += len[r] + 1;
	}
	if (!(all = malloc(total + 1))) {
		errprintf(err, "out of memory for %d ranks' records", a->world_size);
		goto out;
	}
	for (r = 0; r < n; r++) {
		memcpy(all + used, v[r], len[r]);
		used += len[r];
		all[used++] = '\n';
	}
	all[used] = '\0';
out:
	for (r = 0; v && r < n; r++)
		free(v[r]);
	free(v);
	free(len);
	free(keys);
	free(names);
	return all;
}

/* A node's table writer: take every rank's record. What SLURM_* said of each rank (host,
 * node, local rank) must agree with what that rank said of itself. */
static int take_records(struct alloc *a, const char *all, struct dp_error *err)
{
	const char *p = all;
	int r, nodeid, port;

	for (r = 0; r < a->world_size; r++) {
		struct alloc_rank x;
		char line[ALLOC_RECORD_MAX];
		const char *nl = strchr(p, '\n');

		memset(&x, 0, sizeof(x));
		if (!nl || (size_t)(nl - p) >= sizeof(line)) {
			errprintf(err, "rank 0's list of records ends before rank %d", r);
			return -1;
		}
		memcpy(line, p, (size_t)(nl - p));
		line[nl - p] = '\0';
		p = nl + 1;
		if (alloc_record_parse(line, &x, &nodeid, &port) != 0) {
			errprintf(err, "rank %d published a malformed record: '%s'", r, line);
			return -1;
		}
		if (strcmp(x.host, a->ranks[r].host) != 0 || nodeid != a->ranks[r].node_rank ||
		    x.local_rank != a->ranks[r].local_rank) {
			errprintf(
			    err,
			    "rank %d says it is local rank %d on %s (node %d), but SLURM_* put "
			    "it as local rank %d on %s (node %d): run with --mpi=pmix",
			    r, x.local_rank, x.host, nodeid, a->ranks[r].local_rank,
			    a->ranks[r].host, a->ranks[r].node_rank);
			return -1;
		}
		snprintf(a->ranks[r].addr, sizeof(a->ranks[r].addr), "%s", x.addr);
		a->ranks[r].gpu.index = x.gpu.index;
		a->ranks[r].gpu.count = x.gpu.count;
		snprintf(a->ranks[r].device_ip, sizeof(a->ranks[r].device_ip), "%s", x.device_ip);
		snprintf(a->ranks[r].gpu.id, sizeof(a->ranks[r].gpu.id), "%s", x.gpu.id);
	}
	return 0;
}

int alloc_store_open(struct alloc *a, const struct alloc_opts *o, struct dp_error *err)
{
	struct store_opts so;
	struct store *st = NULL;
	const char **hosts;
	char job[2 * RT_ID_MAX + 2], key[64], rec[ALLOC_RECORD_MAX], *all = NULL;
	void *v = NULL;
	size_t len;
	int r, rv = -1;

	hosts = malloc((size_t)a->world_size * sizeof(*hosts));
	if (!hosts) {
		errprintf(err, "out of memory for %d ranks", a->world_size);
		return -1;
	}
	for (r = 0; r < a->world_size; r++)
		hosts[r] = a->ranks[r].host;
	snprintf(job, sizeof(job), "%s.%s", a->job_id, a->step_id);
	memset(&so, 0, sizeof(so));
	so.master_addr = a->master_addr;
	so.master_port = a->master_port;
	so.rank = a->rank;
	so.world_size = a->world_size;
	so.job = job;
	so.secret = getenv(ENV_DPTRAIN_STORE_SECRET);
	so.hosts = hosts;
	so.timeout_s = o->timeout_s;
	rv = store_open(&st, &so, err); /* it keeps copies of the hosts */
	free(hosts);
	if (rv != 0)
		return -1;
	rv = -1;
	a->store = st;
	alloc_record_format(rec, sizeof(rec), &a->ranks[a->rank], a->node_rank, 0);
	snprintf(key, sizeof(key), KEY_RECORD "%d", a->rank);
	if (store_set(st, key, rec, strlen(rec), err) != 0)
		goto out;
	if (a->rank == 0) {
		all = gather_records(a, o->timeout_s, err);
		if (!all || store_set(st, KEY_RECORDS, all, strlen(all), err) != 0)
			goto out;
	} else if (a->local_rank == 0) {
		if (store_get(st, KEY_RECORDS, &v, &len, o->timeout_s, err) != 0)
			goto out;
		all = v;
		v = NULL;
	}
	if (all && take_records(a, all, err) != 0)
		goto out;
	rv = 0;
out:
	free(all);
	free(v);
	return rv;
}

int alloc_store_gate(struct alloc *a, int timeout_s, struct dp_error *err)
{
	void *v = NULL;
	size_t len;

	if (a->rank == 0)
		return store_set(st_of(a), KEY_GATE, "1", 1, err);
	if (store_get(st_of(a), KEY_GATE, &v, &len, timeout_s, err) != 0)
		return errprintf(err,
				 "rank 0 (on %s) did not take the output directory (%s); see its "
				 "messages; nothing written there",
				 a->ranks[0].host, err->text);
	free(v);
	return 0;
}

int alloc_store_write_table(struct alloc *a, const struct ranktable *rt, const char *path,
			    int timeout_s, struct dp_error *err)
{
	struct dp_error differs; /* why rank 0's table is not there, not an error */
	struct ranktable there;
	void *v = NULL;
	size_t len;
	int same;

	if (a->local_rank != 0)
		return 0;
	if (a->rank == 0) {
		if (alloc_table_write(rt, path, err) < 0)
			return -1;
		return store_set(st_of(a), KEY_TABLE, "1", 1, err) == 0 ? 1 : -1;
	}
	if (store_get(st_of(a), KEY_TABLE, &v, &len, timeout_s, err) != 0)
		return errprintf(
		    err, "rank 0 (on %s) did not write its rank table (%s); see its messages",
		    a->ranks[0].host, err->text);
	free(v);
	/* Rank 0's table is there when the directory is shared: it is the same table. */
	memset(&there, 0, sizeof(there));
	same = rt_read(&there, path, &differs) == 0 &&
	       rt_compare(&there, rt, RT_SCHEMA_DPTRAIN, &differs) == 0;
	rt_free(&there);
	return same ? 0 : alloc_table_write(rt, path, err);
}

int alloc_store_sync(struct alloc *a, int timeout_s, struct dp_error *err)
{
	return store_barrier(st_of(a), "dptrain.launch.ready", timeout_s, err);
}

void alloc_store_abort(struct alloc *a, const char *msg)
{
	if (a->store)
		store_abort(st_of(a), msg);
}

void alloc_store_finish(struct alloc *a, int timeout_s)
{
	store_close(st_of(a), timeout_s);
	a->store = NULL;
}
