/* slurm_step.h — what Slurm tells a task of its job step, read once: the ids, where this task
 * is (SLURM_PROCID, ...), the step's nodes and tasks, and the CPUs it has, with the older
 * names and the job's variables (a batch script, outside any step) as fallbacks. The one
 * reader of these variables: the launcher's SLURM_* source (launcher/alloc_env.c) and the rank
 * table from the environment (ranktable/rt_env.c) both read them here. Reads getenv only:
 * no Slurm library; the plugin, which reads the task's environment through spank_getenv,
 * does not use it. */
#ifndef DPTRAIN_SLURM_STEP_H
#define DPTRAIN_SLURM_STEP_H

#include "common/error.h"

/* One value and the variable it came from: the first of its names that is set and not empty;
 * value NULL and name the first name when none is (for "NAME is not set"). */
struct dp_slurm_var {
	const char *name;
	const char *value;
};

struct dp_slurm_step {
	int in_step; /* SLURM_STEP_NODELIST is set: a task of an srun step, else the job's */
	struct dp_slurm_var job_id;	    /* SLURM_JOB_ID, SLURM_JOBID */
	struct dp_slurm_var step_id;	    /* SLURM_STEP_ID, SLURM_STEPID */
	struct dp_slurm_var procid;	    /* SLURM_PROCID: the task's rank in the step */
	struct dp_slurm_var localid;	    /* SLURM_LOCALID: its rank on its node */
	struct dp_slurm_var nodeid;	    /* SLURM_NODEID: its node's index in the step */
	struct dp_slurm_var nodelist;	    /* in a step SLURM_STEP_NODELIST; else
					     * SLURM_JOB_NODELIST, SLURM_NODELIST */
	struct dp_slurm_var tasks_per_node; /* in a step SLURM_STEP_TASKS_PER_NODE, then
					     * SLURM_TASKS_PER_NODE; else the latter */
	struct dp_slurm_var ntasks;	    /* in a step SLURM_STEP_NUM_TASKS, SLURM_NTASKS; else
					     * SLURM_NTASKS, SLURM_NPROCS */
	struct dp_slurm_var nnodes;	    /* SLURM_STEP_NUM_NODES */
	struct dp_slurm_var distribution;   /* SLURM_DISTRIBUTION ("block", "cyclic:...", ...) */
	struct dp_slurm_var cpus_per_task;  /* SLURM_CPUS_PER_TASK */
	struct dp_slurm_var cpus_on_node;   /* SLURM_CPUS_ON_NODE */
};

/* Read them all from the environment now. The values point into the environment: valid
 * until it changes. */
void dp_slurm_step_read(struct dp_slurm_step *s);

/* An integer variable of s as dp_parse_int (common/envint.h) takes it, named by the variable
 * it came from: 1 with *out, 0 when not set, -1 with "NAME='VALUE' is not an integer ..." in
 * err. */
int dp_slurm_int(const struct dp_slurm_var *v, int min, int max, int *out, struct dp_error *err);

#endif
