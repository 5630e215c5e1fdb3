/* slurm_step.c — a Slurm step's variables, read once (slurm_step.h). */
#include "common/slurm_step.h"
#include "common/env.h"
#include "common/envint.h"

#include <stdlib.h>
#include <string.h>

/* The first of names (NULL-terminated) that is set and not empty. */
static struct dp_slurm_var first_set(const char *const *names)
{
	struct dp_slurm_var v = {names[0], NULL};

	for (; *names; names++) {
		const char *s = getenv(*names);
		if (s && *s) {
			v.name = *names;
			v.value = s;
			break;
		}
	}
	return v;
}

#define FIRST(...) first_set((const char *const[]){__VA_ARGS__, NULL})

void dp_slurm_step_read(struct dp_slurm_step *s)
{
	const char *nodes = getenv(ENV_SLURM_STEP_NODELIST);

	memset(s, 0, sizeof(*s));
	s->in_step = nodes && *nodes;
	s->job_id = FIRST(ENV_SLURM_JOB_ID, ENV_SLURM_JOBID);
	s->step_id = FIRST(ENV_SLURM_STEP_ID, ENV_SLURM_STEPID);
	s->procid = FIRST(ENV_SLURM_PROCID);
	s->localid = FIRST(ENV_SLURM_LOCALID);
	s->nodeid = FIRST(ENV_SLURM_NODEID);
	if (s->in_step) {
		s->nodelist = FIRST(ENV_SLURM_STEP_NODELIST);
		s->tasks_per_node = FIRST(ENV_SLURM_STEP_TASKS_PER_NODE, ENV_SLURM_TASKS_PER_NODE);
		s->ntasks = FIRST(ENV_SLURM_STEP_NUM_TASKS, ENV_SLURM_NTASKS);
	} else {
		s->nodelist = FIRST(ENV_SLURM_JOB_NODELIST, ENV_SLURM_NODELIST);
		s->tasks_per_node = FIRST(ENV_SLURM_TASKS_PER_NODE);
		s->ntasks = FIRST(ENV_SLURM_NTASKS, ENV_SLURM_NPROCS);
	}
	s->nnodes = FIRST(ENV_SLURM_STEP_NUM_NODES);
	s->distribution = FIRST(ENV_SLURM_DISTRIBUTION);
	s->cpus_per_task = FIRST(ENV_SLURM_CPUS_PER_TASK);
	s->cpus_on_node = FIRST(ENV_SLURM_CPUS_ON_NODE);
}

int dp_slurm_int(const struct dp_slurm_var *v, int min, int max, int *out, struct dp_error *err)
{
	return dp_parse_int(v->name, v->value, min, max, out, err);
}
