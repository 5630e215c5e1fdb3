/* alloc_env.c — the allocation without PMIx: from Slurm's SLURM_* variables (srun --mpi=none;
 * read by common/slurm_step.c) or from torchrun-style RANK/WORLD_SIZE/... (dptrain-run,
 * torchrun). A rank then knows only its own address and GPU: peers on other nodes get 0.0.0.0
 * ("unknown") and GPU -1 until the launchers meet (alloc_store.c, SLURM_* source). Reads the
 * environment; writes nothing. */
#include "common/error.h"
#include "common/env.h"
#include "common/envint.h"
#include "common/slurm_step.h"
#include "launcher/alloc_source.h"

#include "ranktable/hostlist.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNKNOWN_ADDR "0.0.0.0"

/* A required integer variable (rc: dp_parse_int's for it). */
static int need(int rc, const char *name, struct dp_error *err, const char *hint)
{
	if (rc == 0)
		errprintf(err, "%s is not set (%s)", name, hint);
	return rc == 1 ? 0 : -1;
}

/* A required integer variable of the environment. */
static int need_int(const char *name, int min, int *out, struct dp_error *err, const char *hint)
{
	return need(dp_env_int(name, min, INT_MAX, out, err), name, err, hint);
}

/* A required integer variable of the Slurm step. */
static int need_slurm(const struct dp_slurm_var *v, int min, int *out, struct dp_error *err,
		      const char *hint)
{
	return need(dp_slurm_int(v, min, INT_MAX, out, err), v->name, err, hint);
}

int alloc_from_slurm(struct alloc *a, const struct alloc_opts *o, struct dp_error *err)
{
	static const char hint[] = "not in a Slurm job step? run under srun, or use "
				   "DPTRAIN_SOURCE=env with RANK, WORLD_SIZE, ...";
	const char *list, *tpn, *dist;
	char myaddr[RT_ADDR_MAX], addr[RT_ADDR_MAX];
	struct dp_error rterr;
	struct dp_slurm_step ss;
	char **hosts = NULL;
	int *counts = NULL, *node_of = NULL, *local_of = NULL;
	int nhosts = 0, ncounts = 0, world, rank, local, node, nnodes, sum, r, k, rv = -1;

	rterr.text[0] = '\0';
	dp_slurm_step_read(&ss);
	if (need_slurm(&ss.procid, 0, &rank, err, hint) ||
	    need_slurm(&ss.localid, 0, &local, err, hint) ||
	    need_slurm(&ss.nodeid, 0, &node, err, hint) ||
	    need_slurm(&ss.ntasks, 1, &world, err, hint))
		goto out;
	/* a task of a step: the step's variables (SLURM_STEP_NODELIST makes it one) */
	list = ss.in_step ? ss.nodelist.value : NULL;
	tpn = ss.tasks_per_node.value;
	dist = ss.distribution.value;
	if (!list || !tpn) {
		errprintf(err, "%s is not set (%s)",
			  !list ? ENV_SLURM_STEP_NODELIST : ENV_SLURM_STEP_TASKS_PER_NODE, hint);
		goto out;
	}
	if (rt_hostlist_expand(list, &hosts, &nhosts, &rterr) != 0) {
		errprintf(err, "SLURM_STEP_NODELIST: %s", rterr.text);
		goto out;
	}
	if (rt_tasks_per_node_expand(tpn, &counts, &ncounts, &rterr) != 0) {
		errprintf(err, "SLURM_STEP_TASKS_PER_NODE: %s", rterr.text);
		goto out;
	}
	if (ncounts != nhosts) {
		errprintf(
		    err,
		    "SLURM_STEP_NODELIST='%s' names %d nodes but SLURM_STEP_TASKS_PER_NODE='%s' "
		    "counts %d",
		    list, nhosts, tpn, ncounts);
		goto out;
	}
	if (dp_slurm_int(&ss.nnodes, 1, INT_MAX, &nnodes, err) == 1 && nnodes != nhosts) {
		errprintf(err, "SLURM_STEP_NUM_NODES=%d but SLURM_STEP_NODELIST='%s' names %d",
			  nnodes, list, nhosts);
		goto out;
	}
	for (sum = 0, k = 0; k < ncounts; k++)
		sum += counts[k];
	if (sum != world || rank >= world || node >= nhosts || local >= counts[node]) {
		errprintf(
		    err,
		    "inconsistent Slurm variables: rank %d of %d, node %d of %d, local rank %d "
		    "of %d (SLURM_STEP_TASKS_PER_NODE='%s' sums to %d)",
		    rank, world, node, nhosts, local, node < nhosts ? counts[node] : 0, tpn, sum);
		goto out;
	}
	node_of = malloc((size_t)world * sizeof(int));
	local_of = malloc((size_t)world * sizeof(int));
	a->ranks = calloc((size_t)world, sizeof(*a->ranks));
	if (!node_of || !local_of || !a->ranks) {
		errprintf(err, "out of memory for %d ranks", world);
		goto out;
	}
	if (rt_slurm_layout(dist, nhosts, counts, world, node_of, local_of, err) != 0)
		goto out;
	/* The layout is derived; Slurm's own word for this rank must agree with it. */
	if (node_of[rank] != node || local_of[rank] != local) {
		errprintf(err,
			  "Slurm puts rank %d on node %d as local rank %d, but the %s layout of "
			  "SLURM_STEP_TASKS_PER_NODE='%s' says node %d, local rank %d; run with "
			  "--mpi=pmix",
			  rank, node, local, dist ? dist : "block", tpn, node_of[rank],
			  local_of[rank]);
		goto out;
	}
	a->world_size = world;
	a->rank = rank;
	if (alloc_iface_addr(o->iface, myaddr, err) != 0)
		goto out;
	for (k = 0; k < nhosts; k++) {
		/* Other nodes' ranks say their own address in the launchers' store
		 * (alloc_store.c); until then it is unknown. */
		snprintf(addr, sizeof(addr), "%s", k == node ? myaddr : UNKNOWN_ADDR);
		for (r = 0; r < world; r++) {
			struct alloc_rank *x = &a->ranks[r];
			if (node_of[r] != k)
				continue;
			snprintf(x->host, sizeof(x->host), "%s", hosts[k]);
			snprintf(x->addr, sizeof(x->addr), "%s", addr);
			x->node_rank = k;
			x->local_rank = local_of[r];
			x->gpu.index = -1;
		}
	}
	if (alloc_self_gpu(o, ALLOC_SRC_SLURM, local, &a->ranks[rank].gpu, err) != 0 ||
	    alloc_self_device_ip(o, &a->ranks[rank], err) != 0)
		goto out;
	/* Every rank must reach the same master: all of them resolve the first node's name the
	 * same way (on that node too, where an interface address could differ), else take the
	 * address Slurm reaches that node on (NodeAddr). */
	if (!a->master_addr[0] && rt_resolve_host(hosts[0], a->master_addr, &rterr) != 0) {
		struct dp_error why;

		if (alloc_node_addr(hosts[0], a->master_addr, o->timeout_s, &why) != 0) {
			a->master_addr[0] = '\0';
			errprintf(err,
				  "cannot find the master: %s (first node of SLURM_STEP_NODELIST), "
				  "and Slurm gives no usable address for it (%s); make node names "
				  "resolvable, set MASTER_ADDR, or run with --mpi=pmix",
				  rterr.text, why.text);
			goto out;
		}
	}
	if (!a->master_port)
		a->master_port =
		    rt_default_port(a->job_id, a->step_id, getenv(ENV_DPTRAIN_STORE_SECRET));
	rv = 0;
out:
	if (hosts)
		rt_hostlist_free(hosts, nhosts);
	free(counts);
	free(node_of);
	free(local_of);
	return rv;
}

int alloc_from_env(struct alloc *a, const struct alloc_opts *o, struct dp_error *err)
{
	static const char hint[] = "the env source needs RANK, WORLD_SIZE, MASTER_ADDR and "
				   "MASTER_PORT, and LOCAL_RANK with LOCAL_WORLD_SIZE on several "
				   "nodes";
	char myhost[RT_HOST_MAX], myaddr[RT_ADDR_MAX], addr[RT_ADDR_MAX];
	int world, rank, local = 0, lws = 0, node = 0, nnodes, r, k, rv = -1;
	int have_local, have_lws, have_node;

	if (need_int(ENV_RANK, 0, &rank, err, hint) ||
	    need_int(ENV_WORLD_SIZE, 1, &world, err, hint))
		goto out;
	if ((have_local = dp_env_int(ENV_LOCAL_RANK, 0, INT_MAX, &local, err)) < 0 ||
	    (have_lws = dp_env_int(ENV_LOCAL_WORLD_SIZE, 1, INT_MAX, &lws, err)) < 0)
		goto out;
	have_node = dp_env_int(ENV_GROUP_RANK, 0, INT_MAX, &node, err);
	if (have_node == 0)
		have_node = dp_env_int(ENV_NODE_RANK, 0, INT_MAX, &node, err);
	if (have_node < 0)
		goto out;
	if (rank >= world) {
		errprintf(err, "RANK=%d is not below WORLD_SIZE=%d", rank, world);
		goto out;
	}
	if (have_local != have_lws) {
		errprintf(err, "%s is set but %s is not (%s)",
			  have_local ? ENV_LOCAL_RANK : ENV_LOCAL_WORLD_SIZE,
			  have_local ? ENV_LOCAL_WORLD_SIZE : ENV_LOCAL_RANK, hint);
		goto out;
	}
	if (!have_local) {
		local = rank;
		lws = world;
	}
	if (local >= lws || lws > world || world % lws != 0) {
		errprintf(
		    err,
		    "LOCAL_RANK=%d, LOCAL_WORLD_SIZE=%d, WORLD_SIZE=%d: the env source needs "
		    "LOCAL_RANK < LOCAL_WORLD_SIZE and the same number of ranks on every node",
		    local, lws, world);
		goto out;
	}
	nnodes = world / lws;
	if (!have_node)
		node = rank / lws;
	if (rank != node * lws + local) {
		errprintf(err,
			  "RANK=%d is not node rank %d * LOCAL_WORLD_SIZE %d + LOCAL_RANK %d: the "
			  "env source expects ranks numbered node by node",
			  rank, node, lws, local);
		goto out;
	}
	if (!a->master_addr[0] || !a->master_port) {
		errprintf(err, "%s is not set (%s)",
			  a->master_addr[0] ? ENV_MASTER_PORT : ENV_MASTER_ADDR, hint);
		goto out;
	}
	a->ranks = calloc((size_t)world, sizeof(*a->ranks));
	if (!a->ranks) {
		errprintf(err, "out of memory for %d ranks", world);
		goto out;
	}
	a->world_size = world;
	a->rank = rank;
	alloc_hostname(myhost);
	if (alloc_iface_addr(o->iface, myaddr, err) != 0)
		goto out;
	for (k = 0; k < nnodes; k++) {
		if (k == node)
			snprintf(addr, sizeof(addr), "%s", myaddr);
		else if (k == 0 && rt_resolve_host(a->master_addr, addr, err) == 0)
			;
		else
			snprintf(addr, sizeof(addr), UNKNOWN_ADDR);
		for (r = k * lws; r < (k + 1) * lws; r++) {
			struct alloc_rank *x = &a->ranks[r];
			if (k == node)
				snprintf(x->host, sizeof(x->host), "%s", myhost);
			else
				snprintf(x->host, sizeof(x->host), "unknown-node%d", k);
			snprintf(x->addr, sizeof(x->addr), "%s", addr);
			x->node_rank = k;
			x->local_rank = r - k * lws;
			x->gpu.index = -1;
			/* The ranks of one node share the launcher's environment (dptrain-run,
			 * torchrun), so their GPUs are known too. */
			if (k == node &&
			    (alloc_self_gpu(o, ALLOC_SRC_ENV, x->local_rank, &x->gpu, err) != 0 ||
			     alloc_self_device_ip(o, x, err) != 0))
				goto out;
		}
	}
	rv = 0;
out:
	return rv;
}
