/* local_run.h — dptrain-run's N ranks on this machine without Slurm, phase by phase: the job
 * config checked once, this run made a job (its id, output directory and lock, master port,
 * secret, the torchrun-style variables), each rank started through dptrain-launch in its own
 * process group, then waited for: signals passed on, the others stopped when one fails, every
 * crash named. Each phase returns -1 with err on failure (dptrain-run then exits 1).
 * dptrain-run's main parses its arguments and calls them in order. */
#ifndef DPTRAIN_LOCAL_RUN_H
#define DPTRAIN_LOCAL_RUN_H

#include <signal.h>
#include <sys/types.h>

#include "common/error.h"
#include "config/config.h"
#include "launcher/launcher.h"

#define LOCAL_RUN_MAX_RANKS 4096
#define LOCAL_RUN_GRACE_S   10 /* after SIGTERM, before SIGKILL, when a rank failed */

struct local_run_rank {
	pid_t pid;  /* 0 once reaped */
	pid_t pgid; /* the rank's process group (its first pid) */
	int status;
};

/* The program's one context. */
struct local_run {
	/* from the command line (main) */
	int nranks;
	int verbose;
	int grace_s;
	const char *cfg_path;	 /* or NULL */
	const char *outdir_opt;	 /* -o, or NULL */
	const char *timeout_opt; /* --timeout, or NULL */
	char **cmd;

	/* what the phases made */
	struct cfg c;
	int per_rank_logs;
	char pattern[LAUNCH_PATH_MAX]; /* the output directory, before %j %s %n are expanded */
	char outdir[LAUNCH_PATH_MAX];  /* ... expanded and resolved */
	char job[64];
	char *launcher, *trainer;
	int port, port_fd, lock_fd;
	struct local_run_rank *ranks;
	int alive;
	int failed;	 /* the first rank that failed, or -1 */
	int interrupted; /* a stop signal was passed on to the ranks */
	sigset_t block, oldmask;
};

/* Zeroed, descriptors -1, the default grace. */
void local_run_init(struct local_run *r);

/* The phases, in order. */

/* The job config, if any, checked here once, so a typo fails before N ranks start (all of it
 * for the bundled trainer, what the launch uses for any other command), and passed on as
 * DPTRAIN_CONFIG (an outer job's is removed); the output directory's pattern. */
int local_run_config(struct local_run *r, struct dp_error *err);
/* dptrain-launch (required) and dptrain (DPTRAIN_TRAINER, unless set) next to this program. */
int local_run_programs(struct local_run *r, struct dp_error *err);
/* This run as a job: its id (local.<pid>), the output directory's name, the master port held
 * until the ranks are done; DPTRAIN_SOURCE=env, DPTRAIN_JOB_ID, DPTRAIN_STEP_ID. */
int local_run_job(struct local_run *r, struct dp_error *err);
/* The output directory made, checked (launch_dir_safe) and locked before any rank starts: in
 * use by another live run or job, it is refused with nothing written. The ranks inherit the
 * lock (DPTRAIN_LOCK_FD: rank 0's launcher takes it as its own). */
int local_run_outdir(struct local_run *r, struct dp_error *err);
/* WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK, MASTER_ADDR, MASTER_PORT, this run's
 * secret, DPTRAIN_TIMEOUT (--timeout). */
int local_run_environment(struct local_run *r, struct dp_error *err);
/* The stop signals and SIGCHLD blocked (local_run_wait takes them), each rank started. */
int local_run_start(struct local_run *r, struct dp_error *err);
/* Until every rank has ended: signals passed on to every rank; when one fails the others get
 * SIGTERM, then SIGKILL after the grace; every crash named with its train.log and the error
 * it recorded. Returns dptrain-run's exit status: the first failed rank's (128+N for signal
 * N), else that of a rank that ended otherwise than with 0 (4: stopped on request), else 0. */
int local_run_wait(struct local_run *r);
/* Whatever a failed or stopped rank left in its process group killed; everything freed. */
void local_run_end(struct local_run *r);

#endif
