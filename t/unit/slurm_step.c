/* slurm_step.c (test) — common/slurm_step.c, the one reader of a Slurm step's variables: each
 * value with the variable it came from, the older names and the job's variables as fallbacks
 * (an empty value is passed over), the step's or the job's set chosen by SLURM_STEP_NODELIST,
 * and malformed integers named by the variable that held them. */
#include "common/slurm_step.h"
#include "t/lib/tap.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char *const all[] = {"SLURM_JOB_ID",
				  "SLURM_JOBID",
				  "SLURM_STEP_ID",
				  "SLURM_STEPID",
				  "SLURM_PROCID",
				  "SLURM_LOCALID",
				  "SLURM_NODEID",
				  "SLURM_STEP_NODELIST",
				  "SLURM_JOB_NODELIST",
				  "SLURM_NODELIST",
				  "SLURM_STEP_TASKS_PER_NODE",
				  "SLURM_TASKS_PER_NODE",
				  "SLURM_STEP_NUM_TASKS",
				  "SLURM_NTASKS",
				  "SLURM_NPROCS",
				  "SLURM_STEP_NUM_NODES",
				  "SLURM_DISTRIBUTION",
				  "SLURM_CPUS_PER_TASK",
				  "SLURM_CPUS_ON_NODE",
				  NULL};

static void clear(void)
{
	for (const char *const *n = all; *n; n++)
		unsetenv(*n);
}

/* v came from name with value (NULL: unset, named by name) */
static void var_is(const struct dp_slurm_var *v, const char *name, const char *value,
		   const char *what)
{
	is(v->name, name, "%s: from %s", what, name);
	if (value)
		is(v->value, value, "... %s", value);
	else
		ok(v->value == NULL, "... unset");
}

int main(void)
{
	struct dp_slurm_step s;
	struct dp_error err;
	int v;

	clear();
	dp_slurm_step_read(&s);
	ok(!s.in_step, "nothing set: not in a step");
	var_is(&s.job_id, "SLURM_JOB_ID", NULL, "job id unset");
	var_is(&s.nodelist, "SLURM_JOB_NODELIST", NULL, "node list unset, outside a step");
	var_is(&s.tasks_per_node, "SLURM_TASKS_PER_NODE", NULL, "tasks per node unset");
	var_is(&s.ntasks, "SLURM_NTASKS", NULL, "task count unset");
	ok(dp_slurm_int(&s.procid, 0, INT_MAX, &v, &err) == 0, "an unset integer: 0");

	/* the older names */
	setenv("SLURM_JOBID", "41", 1);
	setenv("SLURM_STEPID", "2", 1);
	setenv("SLURM_NODELIST", "old[1-2]", 1);
	setenv("SLURM_NPROCS", "4", 1);
	dp_slurm_step_read(&s);
	var_is(&s.job_id, "SLURM_JOBID", "41", "job id");
	var_is(&s.step_id, "SLURM_STEPID", "2", "step id");
	var_is(&s.nodelist, "SLURM_NODELIST", "old[1-2]", "the job's node list");
	var_is(&s.ntasks, "SLURM_NPROCS", "4", "the job's task count");
	setenv("SLURM_JOB_ID", "", 1);
	dp_slurm_step_read(&s);
	var_is(&s.job_id, "SLURM_JOBID", "41", "SLURM_JOB_ID empty: passed over");
	setenv("SLURM_JOB_ID", "42", 1);
	setenv("SLURM_STEP_ID", "3", 1);
	setenv("SLURM_JOB_NODELIST", "n[1-2]", 1);
	setenv("SLURM_TASKS_PER_NODE", "2(x2)", 1);
	setenv("SLURM_NTASKS", "4", 1);
	dp_slurm_step_read(&s);
	var_is(&s.job_id, "SLURM_JOB_ID", "42", "the current name wins");
	var_is(&s.step_id, "SLURM_STEP_ID", "3", "step id");
	var_is(&s.nodelist, "SLURM_JOB_NODELIST", "n[1-2]", "the job's node list");
	var_is(&s.tasks_per_node, "SLURM_TASKS_PER_NODE", "2(x2)", "the job's tasks per node");
	var_is(&s.ntasks, "SLURM_NTASKS", "4", "the job's task count");

	/* a step: its own variables, the job's where the step has none */
	setenv("SLURM_STEP_NODELIST", "n1", 1);
	setenv("SLURM_PROCID", "1", 1);
	setenv("SLURM_LOCALID", "1", 1);
	setenv("SLURM_NODEID", "0", 1);
	setenv("SLURM_DISTRIBUTION", "cyclic", 1);
	dp_slurm_step_read(&s);
	ok(s.in_step, "SLURM_STEP_NODELIST set: in a step");
	var_is(&s.nodelist, "SLURM_STEP_NODELIST", "n1", "the step's node list");
	var_is(&s.tasks_per_node, "SLURM_TASKS_PER_NODE", "2(x2)",
	       "no SLURM_STEP_TASKS_PER_NODE: the job's");
	var_is(&s.ntasks, "SLURM_NTASKS", "4", "no SLURM_STEP_NUM_TASKS: SLURM_NTASKS");
	var_is(&s.distribution, "SLURM_DISTRIBUTION", "cyclic", "distribution");
	setenv("SLURM_STEP_TASKS_PER_NODE", "2", 1);
	setenv("SLURM_STEP_NUM_TASKS", "2", 1);
	setenv("SLURM_STEP_NUM_NODES", "1", 1);
	dp_slurm_step_read(&s);
	var_is(&s.tasks_per_node, "SLURM_STEP_TASKS_PER_NODE", "2", "the step's tasks per node");
	var_is(&s.ntasks, "SLURM_STEP_NUM_TASKS", "2", "the step's task count");
	ok(dp_slurm_int(&s.procid, 0, INT_MAX, &v, &err) == 1 && v == 1, "procid 1");
	ok(dp_slurm_int(&s.localid, 0, INT_MAX, &v, &err) == 1 && v == 1, "localid 1");
	ok(dp_slurm_int(&s.nodeid, 0, INT_MAX, &v, &err) == 1 && v == 0, "nodeid 0");
	ok(dp_slurm_int(&s.nnodes, 1, INT_MAX, &v, &err) == 1 && v == 1, "step nodes 1");
	setenv("SLURM_STEP_NODELIST", "", 1);
	dp_slurm_step_read(&s);
	ok(!s.in_step, "SLURM_STEP_NODELIST empty: not a step");
	var_is(&s.nodelist, "SLURM_JOB_NODELIST", "n[1-2]", "... the job's node list");

	/* malformed values, named by the variable they came from */
	setenv("SLURM_STEP_NODELIST", "n1", 1);
	setenv("SLURM_PROCID", "-1", 1);
	unsetenv("SLURM_STEP_NUM_TASKS");
	setenv("SLURM_NTASKS", "four", 1);
	setenv("SLURM_CPUS_PER_TASK", "99999999999", 1);
	dp_slurm_step_read(&s);
	ok(dp_slurm_int(&s.procid, 0, INT_MAX, &v, &err) == -1, "SLURM_PROCID=-1: refused");
	is(err.text, "SLURM_PROCID='-1' is not an integer >= 0", "... saying so");
	ok(dp_slurm_int(&s.ntasks, 1, INT_MAX, &v, &err) == -1, "SLURM_NTASKS=four: refused");
	is(err.text, "SLURM_NTASKS='four' is not an integer >= 1",
	   "... named by the fallback that held it");
	ok(dp_slurm_int(&s.cpus_per_task, 1, 1 << 20, &v, &err) == -1, "an overflow: refused");
	is(err.text, "SLURM_CPUS_PER_TASK='99999999999' is not an integer from 1 to 1048576",
	   "... with the range");

	/* read once: a later change of the environment is not seen */
	setenv("SLURM_PROCID", "5", 1);
	is(s.procid.value, "-1", "values are those of the read");
	clear();
	return done_testing();
}
