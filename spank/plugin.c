/* plugin.c — entry points of the SPANK plugin dptrain.so: registers --dptrain, reads the
 * plugstack.conf arguments, and routes every hook to the file that owns its context (local.c:
 * srun/sbatch/salloc, remote.c: slurmstepd). Holds the plugin's only mutable state, dp.
 * Must not do the work of a context itself, and never calls PMIx. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm_version.h>

#include "spank/plugin.h"
#include "task/wire.h"

SPANK_PLUGIN(dptrain, 1);

/* Option callbacks get no handle or context pointer: they reach the state through here. */
static struct dp_plugin dp;

static int dp_option_cb(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	free(dp.option);
	/* "--dptrain=" (an empty value: an unset variable?) is not "--dptrain" alone */
	dp.option_empty = optarg && !*optarg;
	dp.option = strdup(optarg ? optarg : "");
	if (!dp.option) {
		slurm_error("dptrain: out of memory storing --dptrain");
		return -1;
	}
	return 0;
}

static struct spank_option dp_option = {
    .name = "dptrain",
    .arginfo = "FILE",
    .usage = "[dptrain] run every task as one rank of a data-parallel job: its variables, "
	     "rank table and device directory; FILE: the job config (JSON; the bundled "
	     "trainer needs one); none: this step without dptrain; see dptrain(8)",
    .has_arg = 2, /* optional: --dptrain alone wires up any command without a config */
    .val = 0,
    .cb = dp_option_cb,
};

/* srun --dptrain-version: what this host runs (the plugin, the Slurm it was built for, its
 * wire-up protocol, and the launcher= program's own --version), then exit as --help does. The
 * nodes' launchers answer `srun -N... dptrain-launch --version`. */
static int dp_version_cb(int val, const char *optarg, int remote)
{
	char cmd[PATH_MAX + 32], line[512];
	FILE *f;
	int got = 0;

	(void)val;
	(void)optarg;
	if (remote)
		return 0;
	printf(DP_PLUGIN_VERSION_TEXT " (wire-up protocol %d, built for Slurm %d.%02d.%d)\n",
	       WIRE_VERSION, SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER),
	       SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER),
	       SLURM_VERSION_MICRO(SLURM_VERSION_NUMBER));
	snprintf(cmd, sizeof(cmd), "'%s' --version 2>&1", dp.args.launcher);
	if (!dp.args_error[0] && !strchr(dp.args.launcher, '\'') && (f = popen(cmd, "r"))) {
		while (fgets(line, sizeof(line), f))
			got = 1, printf("launcher %s: %s", dp.args.launcher, line);
		if (pclose(f) != 0)
			got = 0;
	}
	if (!got)
		printf("launcher %s: not installed on this host (the nodes' own: srun -N<nodes> "
		       "dptrain-launch --version)\n",
		       dp.args.launcher);
	if (dp.args_error[0])
		printf("%s\n", dp.args_error);
	fflush(stdout);
	exit(dp.args_error[0] ? 1 : 0);
}

static struct spank_option dp_version_option = {
    .name = "dptrain-version",
    .arginfo = NULL,
    .usage = "[dptrain] show the versions of the dptrain plugin and launcher on this host, "
	     "then exit",
    .has_arg = 0,
    .val = 0,
    .cb = dp_version_cb,
};

/* Only srun, sbatch/salloc and slurmstepd have work to do. slurmd and prolog/epilog load the
 * plugin too; there it does nothing, so a plugstack.conf mistake cannot take a node down. */
static int dp_context_used(void)
{
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
	case S_CTX_REMOTE:
		return 1;
	default:
		return 0;
	}
}

/* A plugstack.conf mistake: kept, with the line's arguments (Slurm does not say which line
 * it read them from), for the jobs that use --dptrain; a job that does not runs as if the
 * plugin were absent, so the mistake can neither stop every srun nor drain a node (a failing
 * slurm_spank_init in slurmstepd fails batch steps too). */
static void dp_keep_args_error(const char *err, int ac, char **av)
{
	size_t n;
	int i;

	n = (size_t)snprintf(dp.args_error, sizeof(dp.args_error),
			     "%s; the plugstack.conf line is: ... dptrain.so", err);
	for (i = 0; i < ac && n < sizeof(dp.args_error); i++)
		n += (size_t)snprintf(dp.args_error + n, sizeof(dp.args_error) - n, " %s", av[i]);
	slurm_verbose("%s (only --dptrain jobs fail)", dp.args_error);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	struct dp_error err;

	if (!dp_context_used())
		return 0;
	/* Registered in every context: the spank_options table is not read by sbatch/salloc. */
	if (spank_option_register(sp, &dp_option) != ESPANK_SUCCESS ||
	    spank_option_register(sp, &dp_version_option) != ESPANK_SUCCESS) {
		slurm_error("dptrain: cannot register the --dptrain options");
		return -1;
	}
	dp.args_error[0] = '\0';
	if (dp_args_parse(&dp.args, ac, av, &err) < 0)
		dp_keep_args_error(err.text, ac, av);
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return dp_local_init_post_opt(&dp, sp);
	case S_CTX_REMOTE:
		return dp_remote_init_post_opt(&dp, sp);
	default:
		return 0;
	}
}

/* srun, once the command is known: the bundled trainer's config is checked whole here. */
int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_LOCAL)
		return 0;
	return dp_local_user_init(&dp, sp);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return dp_remote_task_init(&dp, sp);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	free(dp.option);
	dp.option = NULL;
	return 0;
}
