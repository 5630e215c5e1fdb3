/* ranktable.c — the table in memory: built from an allocation, compared, freed, schema names.
 * Owns struct ranktable's lifetime; JSON lives in rt_json.c, files in rt_io.c, the rules of a
 * valid table in rt_validate.c. */
#include "common/error.h"
#include "ranktable/rt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const rt_schema_names[] = {
    [RT_SCHEMA_DPTRAIN] = "dptrain",
    [RT_SCHEMA_HCCL] = "hccl",
    [RT_SCHEMA_LEGACY] = "legacy",
};

const char *rt_schema_name(enum rt_schema s)
{
	if ((unsigned)s < sizeof(rt_schema_names) / sizeof(rt_schema_names[0]))
		return rt_schema_names[s];
	return "unknown";
}

int rt_schema_from_name(const char *name, enum rt_schema *out)
{
	for (unsigned s = 0; s < sizeof(rt_schema_names) / sizeof(rt_schema_names[0]); s++) {
		if (name && strcmp(name, rt_schema_names[s]) == 0) {
			*out = (enum rt_schema)s;
			return 0;
		}
	}
	return -1;
}

void rt_free(struct ranktable *rt)
{
	if (!rt)
		return;
	free(rt->ranks);
	memset(rt, 0, sizeof(*rt));
}

/* Copy s into a field of `size` bytes; -1 when it does not fit. */
static int rt_copy(char *dst, size_t size, const char *s)
{
	size_t len = strlen(s);
	if (len >= size)
		return -1;
	memcpy(dst, s, len + 1);
	return 0;
}

struct rt_gpu {
	int node, gpu;
};

static int rt_gpu_cmp(const void *a, const void *b)
{
	const struct rt_gpu *x = a, *y = b;
	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	return (x->gpu > y->gpu) - (x->gpu < y->gpu);
}

/* HCCL's device_id must be unique per server: the GPU index where every rank of the node has
 * a GPU of its own, else the local rank (CPU ranks, or GPUs shared between ranks). */
static int rt_derive_devices(struct ranktable *rt)
{
	int n = rt->world_size, m = rt->node_count, k = 0;
	struct rt_gpu *g = malloc((size_t)n * sizeof(*g));
	char *use_gpu = malloc((size_t)m);

	if (!g || !use_gpu) {
		free(g);
		free(use_gpu);
		return -1;
	}
	memset(use_gpu, 1, (size_t)m);
	for (int r = 0; r < n; r++) {
		const struct rt_rank *x = &rt->ranks[r];
		if (x->gpu < 0)
			use_gpu[x->node_rank] = 0;
		else
			g[k++] = (struct rt_gpu){x->node_rank, x->gpu};
	}
	qsort(g, (size_t)k, sizeof(*g), rt_gpu_cmp);
	for (int i = 1; i < k; i++)
		if (g[i].node == g[i - 1].node && g[i].gpu == g[i - 1].gpu)
			use_gpu[g[i].node] = 0;
	for (int r = 0; r < n; r++) {
		struct rt_rank *x = &rt->ranks[r];
		x->device_id = use_gpu[x->node_rank] ? x->gpu : x->local_rank;
	}
	free(g);
	free(use_gpu);
	return 0;
}

int rt_build(struct ranktable *rt, const struct rt_alloc *a, struct dp_error *err)
{
	int n, rv = -1, *zero = NULL;

	memset(rt, 0, sizeof(*rt));
	if (!a || a->world_size < 1 || a->world_size > RT_WORLD_MAX)
		return errprintf(err, "dptrain.world_size: %d is out of range (1..%d)",
				 a ? a->world_size : 0, RT_WORLD_MAX);
	if (!a->ranks)
		return errprintf(err, "dptrain.ranks: the allocation lists no ranks");
	n = a->world_size;
	if (a->master_addr &&
	    rt_copy(rt->master_addr, sizeof(rt->master_addr), a->master_addr) < 0) {
		errprintf(err, "dptrain.master_addr: \"%.40s...\" is longer than %zu characters",
			  a->master_addr, sizeof(rt->master_addr) - 1);
		goto out;
	}
	if (a->job_id && rt_copy(rt->job_id, sizeof(rt->job_id), a->job_id) < 0) {
		errprintf(err, "dptrain.job_id: \"%.40s\" is longer than %zu characters", a->job_id,
			  sizeof(rt->job_id) - 1);
		goto out;
	}
	if (a->step_id && rt_copy(rt->step_id, sizeof(rt->step_id), a->step_id) < 0) {
		errprintf(err, "dptrain.step_id: \"%.40s\" is longer than %zu characters",
			  a->step_id, sizeof(rt->step_id) - 1);
		goto out;
	}
	rt->master_port = a->master_port;
	rt->schema = RT_SCHEMA_DPTRAIN;
	if (!(rt->ranks = calloc((size_t)n, sizeof(*rt->ranks)))) {
		errprintf(err, "out of memory building a table of %d ranks", n);
		goto out;
	}
	rt->world_size = n;
	for (int r = 0; r < n; r++) {
		const struct rt_alloc_rank *x = &a->ranks[r];
		struct rt_rank *y = &rt->ranks[r];
		if (!x->host || rt_copy(y->host, sizeof(y->host), x->host) < 0) {
			errprintf(err, "dptrain.ranks[%d].host: %s", r,
				  x->host ? "longer than 255 characters" : "missing");
			goto out;
		}
		if (!x->addr || rt_copy(y->addr, sizeof(y->addr), x->addr) < 0) {
			errprintf(err, "dptrain.ranks[%d]: address %s", r,
				  x->addr ? "longer than 63 characters" : "missing");
			goto out;
		}
		/* for now the host address: the server_id is derived from it below */
		rt_copy(y->server_id, sizeof(y->server_id), y->addr);
		if (x->node_rank < 0 || x->node_rank >= n) {
			errprintf(
			    err,
			    "dptrain.ranks[%d].node_rank: node rank %d is out of range (0..%d)", r,
			    x->node_rank, n - 1);
			goto out;
		}
		y->node_rank = x->node_rank;
		y->local_rank = x->local_rank;
		y->gpu = x->gpu;
		if (x->node_rank >= rt->node_count)
			rt->node_count = x->node_rank + 1;
	}
	/* A node's server_id is the address of its local rank 0 (rt_check then insists that
	 * local rank 0 exists; without one, a rank's own address stands in). */
	if (!(zero = malloc((size_t)rt->node_count * sizeof(int)))) {
		errprintf(err, "out of memory building a table of %d ranks", n);
		goto out;
	}
	for (int i = 0; i < rt->node_count; i++)
		zero[i] = -1;
	for (int r = 0; r < n; r++)
		if (rt->ranks[r].local_rank == 0 && zero[rt->ranks[r].node_rank] < 0)
			zero[rt->ranks[r].node_rank] = r;
	for (int r = 0; r < n; r++) {
		struct rt_rank *y = &rt->ranks[r];
		int z = zero[y->node_rank];
		if (z >= 0)
			memcpy(y->server_id, rt->ranks[z].addr, RT_ADDR_MAX);
	}
	/* device_ip: the NPU's own address where the node has one (hccn.conf) */
	for (int r = 0; r < n; r++) {
		const char *d = a->ranks[r].device_ip;
		if (d && *d && rt_copy(rt->ranks[r].addr, sizeof(rt->ranks[r].addr), d) < 0) {
			errprintf(err,
				  "dptrain.ranks[%d]: device address longer than 63 characters", r);
			goto out;
		}
	}
	if (rt_derive_devices(rt) < 0) {
		errprintf(err, "out of memory building a table of %d ranks", n);
		goto out;
	}
	rv = rt_check(rt, NULL, err);
out:
	free(zero);
	if (rv < 0)
		rt_free(rt);
	return rv;
}

int rt_compare(const struct ranktable *a, const struct ranktable *b, enum rt_schema carried,
	       struct dp_error *diff)
{
	int all = carried == RT_SCHEMA_DPTRAIN;

	if (a->world_size != b->world_size)
		return -errprintf(diff, "world size %d vs %d", a->world_size, b->world_size);
	if (a->node_count != b->node_count)
		return -errprintf(diff, "node count %d vs %d", a->node_count, b->node_count);
	if (all && strcmp(a->master_addr, b->master_addr) != 0)
		return -errprintf(diff, "master_addr \"%s\" vs \"%s\"", a->master_addr,
				  b->master_addr);
	if (all && a->master_port != b->master_port)
		return -errprintf(diff, "master_port %d vs %d", a->master_port, b->master_port);
	if (all && strcmp(a->job_id, b->job_id) != 0)
		return -errprintf(diff, "job_id \"%s\" vs \"%s\"", a->job_id, b->job_id);
	if (all && strcmp(a->step_id, b->step_id) != 0)
		return -errprintf(diff, "step_id \"%s\" vs \"%s\"", a->step_id, b->step_id);
	for (int r = 0; r < a->world_size; r++) {
		const struct rt_rank *x = &a->ranks[r], *y = &b->ranks[r];
		if (strcmp(x->server_id, y->server_id) != 0)
			return -errprintf(diff, "rank %d: server_id \"%s\" vs \"%s\"", r,
					  x->server_id, y->server_id);
		if (strcmp(x->addr, y->addr) != 0)
			return -errprintf(diff, "rank %d: address \"%s\" vs \"%s\"", r, x->addr,
					  y->addr);
		if (x->device_id != y->device_id)
			return -errprintf(diff, "rank %d: device_id %d vs %d", r, x->device_id,
					  y->device_id);
		if (x->node_rank != y->node_rank)
			return -errprintf(diff, "rank %d: node_rank %d vs %d", r, x->node_rank,
					  y->node_rank);
		if (all && strcmp(x->host, y->host) != 0)
			return -errprintf(diff, "rank %d: host \"%s\" vs \"%s\"", r, x->host,
					  y->host);
		if (all && x->local_rank != y->local_rank)
			return -errprintf(diff, "rank %d: local_rank %d vs %d", r, x->local_rank,
					  y->local_rank);
		if (all && x->gpu != y->gpu)
			return -errprintf(diff, "rank %d: gpu %d vs %d", r, x->gpu, y->gpu);
	}
	return 0;
}
