/* env_export.c — the environment a rank's command gets (PyTorch's env://, MindSpore's rank
 * table variables, dptrain's own) and env.log, its sorted copy in the device directory. Only
 * sets variables; must not decide the values (alloc.c and the rank table do). */
#include "common/error.h"
#include "common/env.h"
#include "launcher/launcher.h"
#include "common/secret.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

int launch_paths_init(struct launch_paths *p, const char *outdir, int rank, struct dp_error *err)
{
	if (snprintf(p->outdir, sizeof(p->outdir), "%s", outdir) >= (int)sizeof(p->outdir) ||
	    snprintf(p->rank_table, sizeof(p->rank_table), "%s/rank_table.json", outdir) >=
		(int)sizeof(p->rank_table) ||
	    snprintf(p->devdir, sizeof(p->devdir), "%s/device%d", outdir, rank) >=
		(int)sizeof(p->devdir) ||
	    snprintf(p->errfile, sizeof(p->errfile), "%s/error.json", p->devdir) >=
		(int)sizeof(p->errfile)) {
		errprintf(err, "output directory is too long: '%.80s...'", outdir);
		return -1;
	}
	return 0;
}

static int set_str(const char *name, const char *value, struct dp_error *err)
{
	if (setenv(name, value, 1) != 0) {
		errprintf(err, "cannot set %s: %s", name, strerror(errno));
		return -1;
	}
	return 0;
}

static int set_int(const char *name, long value, struct dp_error *err)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%ld", value);
	return set_str(name, buf, err);
}

int launch_env_export(const struct alloc *a, const struct ranktable *rt,
		      const struct launch_paths *p, struct dp_error *err)
{
	const struct {
		const char *name;
		long value;
	} ints[] = {
	    /* PyTorch env:// (torchrun's names) */
	    {ENV_RANK, a->rank},
	    {ENV_WORLD_SIZE, a->world_size},
	    {ENV_LOCAL_RANK, a->local_rank},
	    {ENV_LOCAL_WORLD_SIZE, a->local_size},
	    {ENV_NODE_RANK, a->node_rank},
	    {ENV_GROUP_RANK, a->node_rank},
	    {ENV_GROUP_WORLD_SIZE, a->node_count},
	    {ENV_MASTER_PORT, a->master_port},
	    /* MindSpore / HCCL */
	    {ENV_RANK_ID, a->rank},
	    {ENV_RANK_SIZE, a->world_size},
	    {ENV_DEVICE_ID, rt->ranks[a->rank].device_id},
	    /* dptrain: the CUDA device index into CUDA_VISIBLE_DEVICES, -1 for the CPU */
	    {ENV_DPTRAIN_GPU, a->ranks[a->rank].gpu.index},
	};
	const struct {
		const char *name;
		const char *value;
	} strs[] = {
	    {ENV_MASTER_ADDR, a->master_addr},
	    {ENV_RANK_TABLE_FILE, p->rank_table},
	    {ENV_DPTRAIN_RANK_TABLE, p->rank_table},
	    {ENV_DPTRAIN_DEVICE_DIR, p->devdir},
	    {ENV_DPTRAIN_OUTPUT_DIR, p->outdir},
	    {ENV_DPTRAIN_SOURCE, alloc_source_name(a->source)},
	};
	size_t i;

	for (i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		if (set_int(ints[i].name, ints[i].value, err) != 0)
			return -1;
	for (i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
		if (set_str(strs[i].name, strs[i].value, err) != 0)
			return -1;
	return launch_env_frameworks(a, p, err);
}

/* name=value unless the user set name: theirs wins. */
static int set_default(const char *name, const char *value, struct dp_error *err)
{
	const char *v = getenv(name);
	return v && *v ? 0 : set_str(name, value, err);
}

int launch_env_frameworks(const struct alloc *a, const struct launch_paths *p, struct dp_error *err)
{
	char buf[2 * RT_ID_MAX + 2], ifname[IF_NAMESIZE];
	int threads;

	/* The CPUs Slurm gave the task, shared as dptrain's own trainer shares them: OpenMP,
	 * MKL and OpenBLAS threads of a foreign command must not oversubscribe the node. */
	if (rt_task_threads(a->local_size, &threads, err) < 0)
		return -1;
	snprintf(buf, sizeof(buf), "%d", threads);
	if (set_default(ENV_OMP_NUM_THREADS, buf, err) < 0)
		return -1;
	/* OpenMP threads that wait for work spin first (libgomp: 300,000 turns, about a
	 * millisecond, at every barrier and between parallel regions), on a core that a rank of
	 * the same node, a data loader or another job may need: where cores are shared that
	 * turns a step's many short regions into a crawl (contrib/bench/busy-bench.sh: 20-300x
	 * slower with 2 threads a rank on 2 shared cores, dptrain's and PyTorch's alike), and
	 * dptrain's own waits (its ring, DDP's thread, the loader) sleep in the kernel anyway.
	 * Passive (sleep at once) measured faster in every configuration tried, and a busy
	 * neighbour is invisible from here: it is the default unless the user chose a wait
	 * policy or a spin count. */
	if (!getenv(ENV_GOMP_SPINCOUNT) && set_default(ENV_OMP_WAIT_POLICY, "passive", err) < 0)
		return -1;
	/* Gloo and NCCL pick their interface from the host name, which can resolve to
	 * loopback: the interface of this rank's address, the one its peers reach it on. */
	if (alloc_addr_iface(a->ranks[a->rank].addr, ifname) == 1 &&
	    (set_default(ENV_GLOO_SOCKET_IFNAME, ifname, err) < 0 ||
	     set_default(ENV_NCCL_SOCKET_IFNAME, ifname, err) < 0))
		return -1;
	/* torchrun's set: torch.distributed.is_torchelastic_launched() is true, and a rank that
	 * dies in a function decorated with @record writes its exception to the error file. */
	snprintf(buf, sizeof(buf), "%s%s%s", a->job_id, a->step_id[0] ? "." : "", a->step_id);
	const struct {
		const char *name;
		const char *value;
	} elastic[] = {
	    {ENV_TORCHELASTIC_RUN_ID, buf[0] ? buf : "none"},
	    {ENV_TORCHELASTIC_RESTART_COUNT, "0"},
	    {ENV_TORCHELASTIC_MAX_RESTARTS, "0"},
	    {ENV_TORCHELASTIC_USE_AGENT_STORE, "False"}, /* the rendezvous is dptrain's */
	    {ENV_TORCHELASTIC_ERROR_FILE, p->errfile},
	    {ENV_ROLE_NAME, "default"},
	};
	for (size_t i = 0; i < sizeof(elastic) / sizeof(elastic[0]); i++)
		if (set_str(elastic[i].name, elastic[i].value, err) != 0)
			return -1;
	return set_int(ENV_ROLE_RANK, a->rank, err) ||
		       set_int(ENV_ROLE_WORLD_SIZE, a->world_size, err)
		   ? -1
		   : 0;
}

int launch_env_mindspore(const struct alloc *a, int timeout_s, struct dp_error *err)
{
	char host[RT_ADDR_MAX], buf[32];
	struct dp_error why;

	/* MindSpore wants an address: msrun resolves its --master_addr the same way */
	if (rt_resolve_host(a->master_addr, host, &why) != 0) {
		errprintf(err, "MS_SCHED_HOST: %s", why.text);
		return -1;
	}
	snprintf(buf, sizeof(buf), "%d", timeout_s);
	return set_str(ENV_MS_ROLE, "MS_WORKER", err) || set_str(ENV_MS_SCHED_HOST, host, err) ||
		       set_int(ENV_MS_SCHED_PORT, a->master_port, err) ||
		       set_int(ENV_MS_WORKER_NUM, a->world_size, err) ||
		       set_int(ENV_MS_NODE_ID, a->rank, err) ||
		       set_default(ENV_MS_TOPO_TIMEOUT, buf, err)
		   ? -1
		   : 0;
}

static int by_string(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

int launch_env_log(const char *path, struct dp_error *err)
{
	char **vars = NULL, *buf = NULL;
	size_t n = 0, i, len = 0, used = 0;
	int rv = -1;

	while (environ[n])
		n++;
	vars = malloc((n ? n : 1) * sizeof(char *));
	if (!vars)
		goto nomem;
	for (i = 0; i < n; i++) {
		vars[i] = environ[i];
		len += strlen(environ[i]) + 1;
	}
	qsort(vars, n, sizeof(char *), by_string);
	buf = malloc(len + 1);
	if (!buf)
		goto nomem;
	for (i = 0; i < n; i++) {
		size_t l = strlen(vars[i]);
		/* the step's secret is the one value not written down, even in a 0600 file */
		if (dp_env_is(vars[i], ENV_DPTRAIN_STORE_SECRET))
			l = sizeof(ENV_DPTRAIN_STORE_SECRET); /* "NAME=" */
		memcpy(buf + used, vars[i], l);
		used += l;
		buf[used++] = '\n';
	}
	rv = launch_write_atomic(path, buf, used, 0600, err); /* it may hold secrets */
	goto out;
nomem:
	errprintf(err, "out of memory writing %s", path);
out:
	free(vars);
	free(buf);
	return rv;
}
