/* rt_env.c — a rank table from a job step's environment: Slurm's SLURM_* variables (the
 * step's nodes and SLURM_DISTRIBUTION's layout, read by common/slurm_step.c) or
 * torchrun-style WORLD_SIZE/MASTER_* on one host, plus host-name resolution, the default
 * master port, the Slurm layout that dptrain-launch uses too, and the threads a rank should
 * run. Reads variables only: no Slurm or PMIx library, no files. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "common/error.h"
#include "common/env.h"
#include "common/envint.h"
#include "common/slurm_step.h"
#include "ranktable/hostlist.h"
#include "ranktable/rt_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int rt_resolve_host(const char *host, char addr[RT_ADDR_MAX], struct dp_error *err)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
	const struct addrinfo *pick = NULL;
	int rc;

	if (!host || !*host)
		return errprintf(err, "cannot resolve an empty host name");
	if (strlen(host) < RT_ADDR_MAX && rt_is_address(host)) {
		memcpy(addr, host, strlen(host) + 1);
		return 0;
	}
	if ((rc = getaddrinfo(host, NULL, &hints, &res)) != 0)
		return errprintf(err, "cannot resolve host \"%.255s\": %s", host,
				 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
	/* IPv4 first: what the collectives and most clusters' interfaces use. */
	for (const struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
		if (ai->ai_family == AF_INET)
			pick = ai;
	for (const struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
		if (ai->ai_family == AF_INET6)
			pick = ai;
	if (!pick) {
		freeaddrinfo(res);
		return errprintf(err, "cannot resolve host \"%.255s\": no IPv4 or IPv6 address",
				 host);
	}
	const void *sa =
	    pick->ai_family == AF_INET
		? (const void *)&((const struct sockaddr_in *)pick->ai_addr)->sin_addr
		: (const void *)&((const struct sockaddr_in6 *)pick->ai_addr)->sin6_addr;
	inet_ntop(pick->ai_family, sa, addr, RT_ADDR_MAX);
	freeaddrinfo(res);
	return 0;
}

int rt_default_port(const char *job_id, const char *step_id, const char *secret)
{
	unsigned long long job = 0, step = 0;
	if (secret && *secret) { /* FNV-1a over "job\0step\0secret" */
		unsigned long long h = 1469598103934665603ULL;
		const char *part[3] = {job_id ? job_id : "", step_id ? step_id : "", secret};
		for (int i = 0; i < 3; i++)
			for (const char *s = part[i];; s++) {
				h = (h ^ (unsigned char)*s) * 1099511628211ULL;
				if (!*s)
					break;
			}
		return 61000 + (int)(h % 4500);
	}
	for (const char *s = job_id; s && *s >= '0' && *s <= '9'; s++)
		job = (job * 10 + (unsigned long long)(*s - '0')) % 1000000007ULL;
	for (const char *s = step_id; s && *s >= '0' && *s <= '9'; s++)
		step = (step * 10 + (unsigned long long)(*s - '0')) % 1000000007ULL;
	/* 64 steps per job before two steps of one job share a port. */
	return 61000 + (int)((job * 64 + step) % 4500);
}

int rt_slurm_layout(const char *dist, int nnodes, const int *counts, int world, int *node_of,
		    int *local_of, struct dp_error *err)
{
	char kind[32];
	int *given = NULL, plane = 1, r = 0, k, take, rv = -1;
	size_t n;

	n = dist ? strcspn(dist, ":,") : 0;
	snprintf(kind, sizeof(kind), "%.*s", (int)(n < sizeof(kind) ? n : sizeof(kind) - 1),
		 dist ? dist : "");
	if (kind[0] == '\0' || strcmp(kind, "*") == 0 || strcmp(kind, "block") == 0) {
		plane = 0;
	} else if (strcmp(kind, "cyclic") == 0) {
		plane = 1;
	} else if (strncmp(kind, "plane=", 6) == 0 && atoi(kind + 6) > 0) {
		plane = atoi(kind + 6);
	} else {
		errprintf(err,
			  "SLURM_DISTRIBUTION='%.64s': where each rank runs cannot be derived from "
			  "SLURM_* for this distribution; run with --mpi=pmix",
			  dist);
		return -1;
	}
	given = calloc((size_t)nnodes, sizeof(int));
	if (!given) {
		errprintf(err, "out of memory for %d nodes", nnodes);
		return -1;
	}
	if (plane == 0) {
		for (k = 0; k < nnodes; k++)
			for (; given[k] < counts[k] && r < world; given[k]++, r++) {
				node_of[r] = k;
				local_of[r] = given[k];
			}
	} else {
		/* Round robin over the nodes that still have room, `plane` ranks at a time. */
		while (r < world) {
			int progress = 0;
			for (k = 0; k < nnodes && r < world; k++)
				for (take = 0; take < plane && given[k] < counts[k] && r < world;
				     take++, given[k]++, r++) {
					node_of[r] = k;
					local_of[r] = given[k];
					progress = 1;
				}
			if (!progress)
				break;
		}
	}
	if (r != world) {
		errprintf(err, "tasks per node hold %d ranks, not %d", r, world);
		goto out;
	}
	rv = 0;
out:
	free(given);
	return rv;
}

/* MASTER_ADDR/MASTER_PORT set by the user win over what the source would choose. */
static int rt_env_master(const char **addr, int *port, struct dp_error *err)
{
	const char *a = getenv(ENV_MASTER_ADDR);
	int p = 0;
	if (dp_env_int(ENV_MASTER_PORT, 1, 65535, &p, err) < 0)
		return -1;
	if (a && *a) {
		if (!rt_is_address(a) && !rt_is_hostname(a))
			return errprintf(
			    err, "MASTER_ADDR=\"%.64s\" is not an address or a host name", a);
		*addr = a;
	}
	if (p)
		*port = p;
	return 0;
}

static int rt_from_slurm(struct ranktable *rt, char used[RT_USED_MAX], struct dp_error *err)
{
	/* A step's own variables when inside srun; the job's in a batch script. */
	struct dp_slurm_step ss;
	const char *nodes_var, *tasks_var, *ntasks_var;
	const char *nodelist, *tpn, *job, *step, *dist;
	char **hosts = NULL, (*addrs)[RT_ADDR_MAX] = NULL;
	int nhosts = 0, *counts = NULL, ncounts = 0, world = 0, ntasks = 0, have_ntasks, rv = -1;
	int *node_of = NULL, *local_of = NULL;
	struct rt_alloc_rank *ranks = NULL;
	struct rt_alloc a = {0};

	dp_slurm_step_read(&ss);
	nodes_var = ss.nodelist.name;
	nodelist = ss.nodelist.value;
	tasks_var = ss.tasks_per_node.name;
	tpn = ss.tasks_per_node.value;
	ntasks_var = ss.ntasks.name;
	job = ss.job_id.value;
	step = ss.step_id.value;
	dist = ss.distribution.value;
	if (!nodelist)
		return errprintf(err, "neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set: "
				      "not inside a Slurm job");
	if (!tpn)
		return errprintf(err,
				 "%s is set but %s is not: cannot tell how many tasks each node "
				 "runs",
				 nodes_var, tasks_var);
	if (rt_hostlist_expand(nodelist, &hosts, &nhosts, err) < 0) {
		errprefix(err, "%s", nodes_var);
		goto out;
	}
	if (rt_tasks_per_node_expand(tpn, &counts, &ncounts, err) < 0) {
		errprefix(err, "%s", tasks_var);
		goto out;
	}
	if (ncounts != nhosts) {
		errprintf(err, "%s names %d node%s but %s=\"%.64s\" counts tasks for %d", nodes_var,
			  nhosts, nhosts == 1 ? "" : "s", tasks_var, tpn, ncounts);
		goto out;
	}
	for (int i = 0; i < ncounts; i++) {
		if (counts[i] > RT_WORLD_MAX - world) {
			errprintf(err, "%s=\"%.64s\": more than %d tasks", tasks_var, tpn,
				  RT_WORLD_MAX);
			goto out;
		}
		world += counts[i];
	}
	if ((have_ntasks = dp_slurm_int(&ss.ntasks, 1, RT_WORLD_MAX, &ntasks, err)) < 0)
		goto out;
	if (have_ntasks && ntasks != world) {
		errprintf(err, "%s=%d but %s=\"%.64s\" adds up to %d task%s", ntasks_var, ntasks,
			  tasks_var, tpn, world, world == 1 ? "" : "s");
		goto out;
	}
	addrs = calloc((size_t)nhosts, sizeof(*addrs));
	ranks = calloc((size_t)world, sizeof(*ranks));
	if (!addrs || !ranks) {
		errprintf(err, "out of memory for %d ranks", world);
		goto out;
	}
	for (int i = 0; i < nhosts; i++) {
		if (rt_resolve_host(hosts[i], addrs[i], err) < 0) {
			errprefix(err, "%s, node %d", nodes_var, i);
			goto out;
		}
	}
	/* Where Slurm put each rank: block (srun's default), cyclic or plane=N. */
	node_of = malloc((size_t)world * sizeof(int));
	local_of = malloc((size_t)world * sizeof(int));
	if (!node_of || !local_of) {
		errprintf(err, "out of memory for %d ranks", world);
		goto out;
	}
	if (rt_slurm_layout(dist, nhosts, counts, world, node_of, local_of, err) < 0)
		goto out;
	for (int r = 0; r < world; r++)
		ranks[r] = (struct rt_alloc_rank){
		    hosts[node_of[r]], addrs[node_of[r]], node_of[r], local_of[r], -1, NULL};
	a = (struct rt_alloc){world, addrs[0], 0, job, step, ranks};
	a.master_port = rt_default_port(job, step, getenv(ENV_DPTRAIN_STORE_SECRET));
	if (rt_env_master(&a.master_addr, &a.master_port, err) < 0)
		goto out;
	/* Each value is cut short, so the whole line fits in RT_USED_MAX. */
	int len = snprintf(used, RT_USED_MAX, "Slurm variables (%s=%.64s, %s=%.64s", nodes_var,
			   nodelist, tasks_var, tpn);
	if (job)
		len += snprintf(used + len, RT_USED_MAX - (size_t)len, ", %s=%.32s", ss.job_id.name,
				job);
	if (step)
		len += snprintf(used + len, RT_USED_MAX - (size_t)len, ", %s=%.32s",
				ss.step_id.name, step);
	if (dist)
		len += snprintf(used + len, RT_USED_MAX - (size_t)len, ", SLURM_DISTRIBUTION=%.32s",
				dist);
	snprintf(used + len, RT_USED_MAX - (size_t)len, ")");
	rv = rt_build(rt, &a, err);
out:
	rt_hostlist_free(hosts, nhosts);
	free(node_of);
	free(local_of);
	free(counts);
	free(addrs);
	free(ranks);
	return rv;
}

static int rt_from_torchrun(struct ranktable *rt, char used[RT_USED_MAX], struct dp_error *err)
{
	char host[RT_HOST_MAX], addr[RT_ADDR_MAX];
	int world = 0, local = 0;
	struct rt_alloc_rank *ranks = NULL;
	struct rt_alloc a = {0};
	int rv = -1;

	if (dp_env_int(ENV_WORLD_SIZE, 1, RT_WORLD_MAX, &world, err) < 0 ||
	    dp_env_int(ENV_LOCAL_WORLD_SIZE, 1, RT_WORLD_MAX, &local, err) < 0)
		return -1;
	if (!world)
		return errprintf(err, "WORLD_SIZE is not set: no torchrun-style environment");
	if (local && local != world)
		return errprintf(err,
				 "LOCAL_WORLD_SIZE=%d but WORLD_SIZE=%d: torchrun-style variables "
				 "describe only this host, so from-env builds single-host tables "
				 "from them",
				 local, world);
	/* torchrun's own defaults for a single host. */
	a.master_addr = "127.0.0.1";
	a.master_port = 29500;
	if (rt_env_master(&a.master_addr, &a.master_port, err) < 0)
		return -1;
	if (gethostname(host, sizeof(host)) < 0)
		return errprintf(err, "cannot get this host's name: %s", strerror(errno));
	host[sizeof(host) - 1] = '\0';
	/* One host: the master is this host, and its address is every rank's. */
	if (rt_resolve_host(a.master_addr, addr, err) < 0)
		return errprefix(err, ENV_MASTER_ADDR);
	if (!(ranks = calloc((size_t)world, sizeof(*ranks))))
		return errprintf(err, "out of memory for %d ranks", world);
	for (int r = 0; r < world; r++)
		ranks[r] = (struct rt_alloc_rank){host, addr, 0, r, -1, NULL};
	a.world_size = world;
	a.ranks = ranks;
	snprintf(used, RT_USED_MAX,
		 "torchrun-style variables (WORLD_SIZE=%d, MASTER_ADDR=%.64s, MASTER_PORT=%d) on "
		 "this host",
		 world, a.master_addr, a.master_port);
	rv = rt_build(rt, &a, err);
	free(ranks);
	return rv;
}

int rt_from_env(struct ranktable *rt, enum rt_env_source source, char used[RT_USED_MAX],
		struct dp_error *err)
{
	memset(rt, 0, sizeof(*rt));
	used[0] = '\0';
	if (source == RT_ENV_AUTO) {
		struct dp_slurm_step ss;
		dp_slurm_step_read(&ss);
		if (ss.nodelist.value)
			source = RT_ENV_SLURM;
		else if (getenv(ENV_WORLD_SIZE))
			source = RT_ENV_TORCHRUN;
		else
			return errprintf(err,
					 "neither Slurm (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST) "
					 "nor torchrun-style variables (WORLD_SIZE) are set");
	}
	if (source == RT_ENV_SLURM)
		return rt_from_slurm(rt, used, err);
	return rt_from_torchrun(rt, used, err);
}

int rt_task_threads(int local_ranks, int *threads, struct dp_error *err)
{
	int per_task = 0, on_node = 0, n;
	struct dp_slurm_step ss;
	cpu_set_t set;
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	int mine = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
		   : online > 0					? (int)online
								: 1;

	dp_slurm_step_read(&ss);
	if (dp_slurm_int(&ss.cpus_per_task, 1, 1 << 20, &per_task, err) < 0 ||
	    dp_slurm_int(&ss.cpus_on_node, 1, 1 << 20, &on_node, err) < 0)
		return -1;
	if (local_ranks < 1)
		local_ranks = 1;
	if (per_task)
		n = per_task;
	else
		n = (on_node ? on_node : mine) / local_ranks;
	if (n > mine) /* bound to fewer CPUs than that */
		n = mine;
	*threads = n < 1 ? 1 : n;
	return 0;
}
