/* remote.c — the slurmstepd side of dptrain.so: decides once per step whether its tasks are
 * ranks of a dptrain job (user steps with --dptrain or DPTRAIN_CONFIG only; never the batch
 * script, extern or interactive step), then in each task sets the environment and hands the
 * task to the launcher. Must never call PMIx (the task is a fork of slurmstepd, which hosts
 * the PMIx server in the same library: a client call hangs), block, or write files. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "dptrain.h"

/* Remember an error for task_init: failing here would fail the step with a message that
 * only reaches slurmd's log, while task_init's error reaches the user's srun. */
static int dp_remember_relative(struct dp_plugin *dp, const char *path)
{
	snprintf(dp->error, sizeof dp->error,
		 "dptrain: the job config path '%s' is not absolute and srun did not export "
		 "%s (was the step started with --export=NONE?): give --dptrain an absolute path",
		 path, DP_ENV_CONFIG);
	dp->active = 1;
	return 0;
}

static int dp_user_step(spank_t sp)
{
	uint32_t stepid;

	if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
		return 0;
	switch (stepid) {
	case SLURM_BATCH_SCRIPT: /* #SBATCH --dptrain reaches the script: it must run as is */
	case SLURM_EXTERN_CONT:
	case SLURM_INTERACTIVE_STEP:
	case SLURM_PENDING_STEP:
		return 0;
	default:
		return 1;
	}
}

int dp_remote_init_post_opt(struct dp_plugin *dp, spank_t sp)
{
	char env[PATH_MAX];
	int have_env;

	dp->active = 0;
	dp->error[0] = '\0';
	if (!dp_user_step(sp))
		return 0;
	have_env = spank_getenv(sp, DP_ENV_CONFIG, env, sizeof env) == ESPANK_SUCCESS && *env;
	if (!dp->option && !have_env)
		return 0; /* not a dptrain step: leave it exactly as it is */

	/* srun exported the absolute path of --dptrain (or of DPTRAIN_CONFIG) in the job's
	 * environment after validating it; a relative option value is the user's spelling. */
	if (dp->option && dp->option[0] == '/') {
		if (strlen(dp->option) >= sizeof dp->config) {
			snprintf(dp->error, sizeof dp->error,
				 "dptrain: the job config path is longer than %zu characters",
				 sizeof dp->config - 1);
			dp->active = 1;
			return 0;
		}
		snprintf(dp->config, sizeof dp->config, "%s", dp->option);
	} else if (have_env && env[0] == '/')
		snprintf(dp->config, sizeof dp->config, "%s", env);
	else
		return dp_remember_relative(dp, dp->option ? dp->option : env);
	dp->active = 1;
	return 0;
}

static int dp_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
	spank_err_t rc = spank_setenv(sp, var, val, overwrite);

	if (rc != ESPANK_SUCCESS && !(rc == ESPANK_ENV_EXISTS && !overwrite)) {
		slurm_error("dptrain: cannot set %s in the task's environment: %s", var,
			    spank_strerror(rc));
		return -1;
	}
	return 0;
}

/* The launcher as the task will run it: absolute as configured, else found on the job's
 * PATH (a plugin built without DPTRAIN_BINDIR). */
static int dp_find_launcher(spank_t sp, const char *name, char *out, size_t outlen)
{
	char path[8192], *dir, *save = NULL;

	if (strchr(name, '/')) {
		snprintf(out, outlen, "%s", name);
		return access(out, X_OK) == 0 ? 0 : -1;
	}
	if (spank_getenv(sp, "PATH", path, sizeof path) != ESPANK_SUCCESS)
		snprintf(path, sizeof path, "/usr/local/bin:/usr/bin:/bin");
	for (dir = strtok_r(path, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		int n = snprintf(out, outlen, "%s/%s", dir, name);

		if (n > 0 && (size_t)n < outlen && access(out, X_OK) == 0)
			return 0;
	}
	snprintf(out, outlen, "%s", name);
	errno = ENOENT;
	return -1;
}

static int dp_task_env(struct dp_plugin *dp, spank_t sp)
{
	const struct dp_args *a = &dp->args;

	if (dp_setenv(sp, DP_ENV_CONFIG, dp->config, 1) ||
	    dp_setenv(sp, DP_ENV_TRAINER, a->trainer, 1))
		return -1;
#if defined(DPTRAIN_PMIX_MAJOR) && DPTRAIN_PMIX_MAJOR < 5
	/* PMIx 4: without it a second PMIx client in the rank (OpenMPI's MPI_Init after the
	 * launcher's PMIx_Finalize) fails, the ds21 shared-memory store cannot be attached twice.
	 * Not with PMIx 5: its store (shmem2) takes a second client, and with hash alone the
	 * node-level data (PMIX_LOCAL_PEERS) is missing and OpenMPI 5's MPI_Init fails. */
	if (dp_setenv(sp, "PMIX_MCA_gds", "hash", 1))
		return -1;
#endif
	if (a->output_dir[0] && dp_setenv(sp, DP_ENV_OUTPUT_DIR, a->output_dir, 1))
		return -1;
	if (a->iface[0] && dp_setenv(sp, DP_ENV_IFACE, a->iface, 1))
		return -1;
	if (a->timeout[0] && dp_setenv(sp, DP_ENV_TIMEOUT, a->timeout, 1))
		return -1;
	return 0;
}

#ifndef HAVE_SPANK_PREPEND_TASK_ARGV
/* The resource limits srun propagates (PropagateResourceLimits, srun --propagate), applied
 * as slurmstepd does after task_init: the soft limit takes the submit host's value, failures
 * are errors only when the user asked with --propagate ("U" prefix). The variables go. */
static void dp_propagate_rlimits(spank_t sp)
{
	static const struct {
		const char *name;
		int resource;
	} limits[] = {
	    {"CPU", RLIMIT_CPU},     {"FSIZE", RLIMIT_FSIZE},	{"DATA", RLIMIT_DATA},
	    {"STACK", RLIMIT_STACK}, {"CORE", RLIMIT_CORE},	{"RSS", RLIMIT_RSS},
	    {"NPROC", RLIMIT_NPROC}, {"NOFILE", RLIMIT_NOFILE}, {"MEMLOCK", RLIMIT_MEMLOCK},
	    {"AS", RLIMIT_AS},
	};
	size_t i;

	for (i = 0; i < sizeof limits / sizeof limits[0]; i++) {
		char var[32], val[64], *v, *end;
		unsigned long long want;
		struct rlimit r;
		int user;

		snprintf(var, sizeof var, "SLURM_RLIMIT_%s", limits[i].name);
		if (spank_getenv(sp, var, val, sizeof val) != ESPANK_SUCCESS)
			continue;
		spank_unsetenv(sp, var);
		user = val[0] == 'U';
		v = val + user;
		errno = 0;
		want = strtoull(v, &end, 10);
		if (errno || end == v || *end || getrlimit(limits[i].resource, &r) < 0 ||
		    r.rlim_cur == (rlim_t)want)
			continue;
		r.rlim_cur = (rlim_t)want;
		if (setrlimit(limits[i].resource, &r) == 0)
			continue;
		if (user)
			slurm_error(
			    "dptrain: cannot propagate RLIMIT_%s=%s from the submit host: %s",
			    limits[i].name, v, strerror(errno));
		else
			slurm_verbose(
			    "dptrain: cannot propagate RLIMIT_%s=%s from the submit host: "
			    "%s",
			    limits[i].name, v, strerror(errno));
	}
}

/* What slurmstepd does between task_init and its own execve, and would not do for us. Not
 * redone: TaskProlog and srun --task-prolog, creating a user-set TMPDIR, and holding the task
 * for a parallel debugger (see dptrain(8)). */
static int dp_redo_after_task_init(spank_t sp)
{
	dp_propagate_rlimits(sp);
	return dp_setenv(sp, "TMPDIR", "/tmp", 0);
}

/* Slurm before 23.11 cannot prepend to the task's command: become the launcher now, with the
 * task's environment as Slurm built it (PMIx, GPU binding, SLURM_* and the variables above). */
static int dp_exec(spank_t sp, const char *launcher)
{
	char **argv = NULL, **env = NULL, **nargv = NULL;
	int argc = 0, i, e;

	if (dp_redo_after_task_init(sp) < 0)
		return -1;
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS) {
		slurm_error("dptrain: cannot read the task's command and environment from Slurm");
		return -1;
	}
	nargv = calloc((size_t)argc + 2, sizeof *nargv);
	if (!nargv) {
		slurm_error("dptrain: out of memory");
		return -1;
	}
	nargv[0] = (char *)launcher;
	for (i = 0; i < argc; i++)
		nargv[i + 1] = argv[i];
	execve(launcher, nargv, env);
	e = errno;
	slurm_error("dptrain: cannot execute the launcher %s: %s", launcher, strerror(e));
	free(nargv);
	return -1;
}
#endif

int dp_remote_task_init(struct dp_plugin *dp, spank_t sp)
{
	char launcher[PATH_MAX], node[256] = "";

	if (!dp->active)
		return 0;
	if (dp->error[0]) {
		slurm_error("%s", dp->error);
		return -1;
	}
	if (dp_task_env(dp, sp) < 0)
		return -1;
	if (dp_find_launcher(sp, dp->args.launcher, launcher, sizeof launcher) < 0) {
		int e = errno;

		/* The Slurm node name: emulated nodes share one hostname. */
		if (spank_getenv(sp, "SLURMD_NODENAME", node, sizeof node) != ESPANK_SUCCESS)
			gethostname(node, sizeof node - 1);
		slurm_error("dptrain: the launcher %s cannot be executed on node %s: %s; install "
			    "dptrain-launch there or set launcher= in plugstack.conf",
			    launcher, node, strerror(e));
		return -1;
	}
	slurm_verbose("dptrain: handing the task to %s (config %s)", launcher, dp->config);
#ifdef HAVE_SPANK_PREPEND_TASK_ARGV
	{
		const char *prefix[] = {launcher};

		if (spank_prepend_task_argv(sp, 1, prefix) != ESPANK_SUCCESS) {
			slurm_error("dptrain: cannot prepend %s to the task's command", launcher);
			return -1;
		}
		return 0;
	}
#else
	return dp_exec(sp, launcher);
#endif
}
