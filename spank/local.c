/* local.c — the srun, sbatch and salloc side of dptrain.so: finds the job config (--dptrain,
 * else DPTRAIN_CONFIG), validates it with the trainer's own config parser so a bad config
 * fails the command before anything is launched, and exports its absolute path to the job.
 * Runs as the user on the submit host; must not touch a job that does not use dptrain. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "common/env.h"
#include "spank/plugin.h"
#include "common/secret.h"
#include "common/warn.h"

/* The tasks start in another directory (--chdir, or sbatch's srun from elsewhere): the path
 * must not depend on the current one. Symlinks are kept, as the user named them. */
static int dp_absolute(const char *path, char *out, size_t outlen)
{
	char cwd[PATH_MAX];
	int n;

	while (path[0] == '.' && path[1] == '/')
		path += 2;
	if (path[0] == '/') {
		n = snprintf(out, outlen, "%s", path);
	} else {
		if (!getcwd(cwd, sizeof(cwd))) {
			slurm_error(
			    "dptrain: cannot get the current directory to make %s absolute: "
			    "%s",
			    path, strerror(errno));
			return -1;
		}
		n = snprintf(out, outlen, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", path);
	}
	if (n < 0 || (size_t)n >= outlen) {
		slurm_error("dptrain: config path %s is too long", path);
		return -1;
	}
	return 0;
}

/* An srun inside a job submitted with a relative --dptrain=FILE: Slurm hands it the option
 * as typed (SLURM_SPANK_... variables), and this srun may run elsewhere (the script did a
 * cd). The path is resolved once, where the user typed it: sbatch/salloc exported it
 * absolute as DPTRAIN_CONFIG, which is used when the option is the inherited one and names
 * the same file. 1 with the path in out, else 0. */
static int dp_inherited(const char *given, char *out, size_t outlen)
{
	static const char *const vars[] = {ENV_SLURM_SPANK__SLURM_SPANK_OPTION_dptrain_dptrain,
					   ENV__SLURM_SPANK_OPTION_dptrain_dptrain};
	const char *env = getenv(ENV_DPTRAIN_CONFIG), *v, *rel = given;
	size_t i, n, e;
	int inherited = 0;

	if (given[0] == '/' || !env || env[0] != '/')
		return 0;
	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if ((v = getenv(vars[i])) && strcmp(v, given) == 0)
			inherited = 1;
	while (rel[0] == '.' && rel[1] == '/')
		rel += 2;
	n = strlen(rel);
	e = strlen(env);
	if (!inherited || n == 0 || e <= n || env[e - n - 1] != '/' ||
	    strcmp(env + e - n, rel) != 0 || e >= outlen)
		return 0;
	snprintf(out, outlen, "%s", env);
	return 1;
}

int dp_local_init_post_opt(struct dp_plugin *dp, spank_t sp)
{
	const char *given = dp->option;
	const char *from = "--dptrain";
	char path[PATH_MAX];
	struct dp_error err;
	struct cfg c;
	int i, rv = -1;

	(void)sp;
	memset(&c, 0, sizeof(c));
	dp->config[0] = '\0';
	if (given && strcmp(given, DP_OPTION_NONE) == 0) {
		/* One step of a --dptrain job run without dptrain: its tasks must not see the
		 * config either (a script that reads DPTRAIN_CONFIG). */
		unsetenv(ENV_DPTRAIN_CONFIG);
		return 0;
	}
	if (!given) {
		given = getenv(ENV_DPTRAIN_CONFIG);
		from = ENV_DPTRAIN_CONFIG;
		if (!given || !*given)
			return 0; /* not a dptrain job: nothing to do, nothing to change */
	}
	if (dp->args_error[0]) {
		slurm_error("%s; ask the site's Slurm administrators to fix it (jobs without "
			    "--dptrain are not affected)",
			    dp->args_error);
		goto out;
	}
	if (dp->option_empty && given == dp->option) {
		slurm_error("dptrain: --dptrain= has an empty value: give the job config "
			    "(--dptrain=JOB.json), or no value for a command without one "
			    "(--dptrain alone)");
		goto out;
	}
	if (dp_option_nofile(given)) {
		/* --dptrain without a file: the wire-up alone, for any command (a config of an
		 * enclosing job is not this step's) */
		unsetenv(ENV_DPTRAIN_CONFIG);
	} else {
		if (dp_inherited(given, path, sizeof(path))) {
			from = "--dptrain of the job's sbatch or salloc";
		} else if (dp_absolute(given, path, sizeof(path)) < 0) {
			goto out;
		}
		/* what the launch uses; the rest when the command is the bundled trainer
		 * (dp_local_user_init) */
		if (cfg_load_launch(&c, path, &err) < 0) {
			slurm_error("dptrain: %s (from %s=%s); nothing was launched", err.text,
				    from, given);
			goto out;
		}
		if (dp->args.max_timeout[0] && c.timeouts.rendezvous_given &&
		    c.timeouts.rendezvous_s > atof(dp->args.max_timeout)) {
			slurm_error(
			    "dptrain: %s: timeouts.rendezvous_s is %g s, more than this "
			    "site allows (max_timeout=%s in plugstack.conf, see dptrain(8)); "
			    "nothing was launched",
			    path, c.timeouts.rendezvous_s, dp->args.max_timeout);
			goto out;
		}
		for (i = 0; i < c.nwarnings; i++) {
			char line[PATH_MAX + 1024];
			dp_warn_format(line, sizeof(line), "dptrain", NULL, "%s: %s", path,
				       c.warnings[i]);
			slurm_spank_log("%s", line);
		}
		/* srun and sbatch pass their environment to the job: this is how the tasks (and
		 * the sruns of a batch script) learn the absolute path. */
		if (setenv(ENV_DPTRAIN_CONFIG, path, 1) < 0) {
			slurm_error("dptrain: cannot set %s: %s", ENV_DPTRAIN_CONFIG,
				    strerror(errno));
			goto out;
		}
		snprintf(dp->config, sizeof(dp->config), "%s", path);
	}
	dp->active = 1;
	/* Each srun --dptrain (a step) gets its own secret, passed to its tasks with the rest of
	 * srun's environment: the ranks' rendezvous store and collectives let in only who has
	 * it. sbatch and salloc make none: their sruns do. */
	if (spank_context() == S_CTX_LOCAL) {
		char secret[DP_SECRET_LEN + 1];
		if (dp_secret_make(secret, &err) < 0) {
			slurm_error("dptrain: %s; nothing was launched", err.text);
			goto out;
		}
		if (setenv(ENV_DPTRAIN_STORE_SECRET, secret, 1) < 0) {
			slurm_error("dptrain: cannot set %s: %s", ENV_DPTRAIN_STORE_SECRET,
				    strerror(errno));
			goto out;
		}
	}
	if (dp->config[0])
		slurm_verbose("dptrain: job config %s is valid", path);
	rv = 0;
out:
	cfg_free(&c);
	return rv;
}

/* The bundled trainer is the command (`dptrain`, or a path ending in /dptrain): it needs a
 * config with its model and data, checked here so that a mistake fails srun before any task
 * starts. Any other command runs with what init_post_opt checked. */
int dp_local_user_init(struct dp_plugin *dp, spank_t sp)
{
	char **argv = NULL;
	int argc = 0, rv;
	struct dp_error err;
	struct cfg c;

	if (!dp->active)
		return 0;
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv[0])
		return 0;
	if (!cfg_is_trainer_command(argv[0]))
		return 0;
	if (!dp->args.trainer[0]) {
		slurm_error("dptrain: %s; nothing was launched", DP_TRAINER_DISABLED_MSG);
		return -1;
	}
	if (!dp->config[0]) {
		slurm_error("dptrain: the bundled trainer needs a job config: "
			    "--dptrain=JOB.json (see dptrain.json(5)); nothing was launched");
		return -1;
	}
	memset(&c, 0, sizeof(c));
	rv = cfg_load(&c, dp->config, 0, NULL, &err);
	if (rv < 0)
		slurm_error("dptrain: %s (the bundled trainer's config); nothing was launched",
			    err.text);
	else if (dp->args.max_data_workers[0] && c.data.workers > atoi(dp->args.max_data_workers))
		rv = -1, slurm_error("dptrain: %s: data.workers is %d, more than this site allows "
				     "(max_data_workers=%s per rank in plugstack.conf, see "
				     "dptrain(8)); nothing was launched",
				     dp->config, c.data.workers, dp->args.max_data_workers);
	cfg_free(&c);
	return rv;
}
