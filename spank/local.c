/* local.c — the srun, sbatch and salloc side of dptrain.so: finds the job config (--dptrain,
 * else DPTRAIN_CONFIG), validates it with the trainer's own config parser so a bad config
 * fails the command before anything is launched, and exports its absolute path to the job.
 * Runs as the user on the submit host; must not touch a job that does not use dptrain. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "dptrain.h"

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
		if (!getcwd(cwd, sizeof cwd)) {
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

int dp_local_init_post_opt(struct dp_plugin *dp, spank_t sp)
{
	const char *given = dp->option;
	const char *from = "--dptrain";
	char path[PATH_MAX], err[2048];
	struct cfg c;
	int i, rv = -1;

	(void)sp;
	memset(&c, 0, sizeof c);
	if (!given) {
		given = getenv(DP_ENV_CONFIG);
		from = DP_ENV_CONFIG;
		if (!given || !*given)
			return 0; /* not a dptrain job: nothing to do, nothing to change */
	}
	if (dp->args_error[0]) {
		slurm_error("%s; ask the site's Slurm administrators to fix it (jobs without "
			    "--dptrain are not affected)",
			    dp->args_error);
		goto out;
	}
	if (!*given) {
		slurm_error("dptrain: --dptrain needs a job config file: --dptrain=FILE.json");
		goto out;
	}
	if (dp_absolute(given, path, sizeof path) < 0)
		goto out;
	if (cfg_load(&c, path, 0, NULL, err, sizeof err) < 0) {
		slurm_error("dptrain: %s (from %s=%s); nothing was launched", err, from, given);
		goto out;
	}
	for (i = 0; i < c.nwarnings; i++)
		slurm_spank_log("dptrain: %s: warning: %s", path, c.warnings[i]);
	/* srun and sbatch pass their environment to the job: this is how the tasks (and the
	 * sruns of a batch script) learn the absolute path. */
	if (setenv(DP_ENV_CONFIG, path, 1) < 0) {
		slurm_error("dptrain: cannot set %s: %s", DP_ENV_CONFIG, strerror(errno));
		goto out;
	}
	slurm_verbose("dptrain: job config %s is valid", path);
	rv = 0;
out:
	cfg_free(&c);
	return rv;
}
