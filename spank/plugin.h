/* plugin.h — what the files of the SPANK plugin share: the plugin's one context struct and
 * the hooks each context file provides. Internal to spank/; nothing here is exported (see
 * dptrain.map). Must not include PMIx or anything from the trainer but config.h. */
#ifndef DPTRAIN_SPANK_H
#define DPTRAIN_SPANK_H

#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <slurm/spank.h>
#include "common/error.h"
#include "common/env.h"

/* Environment the plugin reads (srun/sbatch side) and sets (in the task). */

/* --dptrain=none: this step without dptrain, in a job submitted with --dptrain (a file of
 * that name is ./none). */
#define DP_OPTION_NONE "none"

/* --dptrain without a file: the wire-up alone, no config. srun and slurmstepd see the option
 * an sbatch/salloc got without a value as "(null)" (Slurm formats the missing value so). */
static inline int dp_option_nofile(const char *option)
{
	return option && (!option[0] || !strcmp(option, "(null)"));
}

/* plugstack.conf arguments; "" means not given (launcher and trainer have defaults). The site
 * policy (default_output_dir=, max_timeout=, max_data_workers=, trainer=none) reaches the
 * launcher and the trainer in variables the plugin sets in every task. */
struct dp_args {
	char launcher[PATH_MAX];
	char trainer[PATH_MAX]; /* "": trainer=none, the bundled trainer is disabled */
	char output_dir[PATH_MAX];
	char default_output_dir[PATH_MAX];
	char iface[64];
	char timeout[32];
	char max_timeout[32];
	char max_data_workers[32];
};

/* plugstack.conf's trainer=none: --dptrain wires up other commands only. */
#define DP_TRAINER_NONE "none"
#define DP_TRAINER_DISABLED_MSG                                                                    \
	"this site disabled the bundled trainer dptrain (trainer=none in plugstack.conf): "        \
	"--dptrain wires up other commands (python train.py, ...) only"

/* The plugin's own version and its wire-up protocol's, for --dptrain-version and messages. */
#define DP_PLUGIN_VERSION_TEXT "dptrain.so " DPTRAIN_VERSION

/* The plugin's state in one process (srun, sbatch, salloc or one slurmstepd). */
struct dp_plugin {
	struct dp_args args;
	char *option;	  /* --dptrain value as given; NULL when the option was not used */
	int option_empty; /* it was given as "--dptrain=", with an empty value */
	/* A plugstack.conf mistake, with the line's arguments: it fails --dptrain jobs only
	 * (every other job must run as if the plugin were not there); "" when none. */
	char args_error[4096];

	/* decided in init_post_opt (srun: for local_user_init; slurmstepd: for the whole step) */
	int active;		    /* slurmstepd: this step's tasks go through the launcher */
	char config[PATH_MAX];	    /* absolute path of the job config; "": a step without one */
	char error[PATH_MAX + 512]; /* remembered for task_init, where the user sees it */
};

/* args.c: parse plugstack.conf's "key=value" words into a (defaults first). Returns 0, or -1
 * with a message starting "dptrain: " in err. */
int dp_args_parse(struct dp_args *a, int ac, char **av, struct dp_error *err);

/* local.c: srun, sbatch and salloc. Validates the config as the launch reads it and exports
 * its absolute path; then (srun) checks it whole when the command is the bundled trainer. */
int dp_local_init_post_opt(struct dp_plugin *dp, spank_t sp);
int dp_local_user_init(struct dp_plugin *dp, spank_t sp);

/* remote.c: slurmstepd. Decides whether the step is a dptrain step; then, per task, has the
 * launcher's helper wire the rank up and sets what it answers in the task. */
int dp_remote_init_post_opt(struct dp_plugin *dp, spank_t sp);
int dp_remote_task_init(struct dp_plugin *dp, spank_t sp);

#endif
