/* handover.c — the end of dptrain-launch's wire-up (wireup.h): how the command is launched
 * (its path, signals, directory, train.log and its header, the tee, MindSpore's scheduler),
 * then the exec, or for the SPANK plugin the records of task/wire.h that let the task run it.
 * Must not talk PMIx or the store: the wire-up is finished when this runs. */
#include "launcher/wireup.h"
#include "common/env.h"
#include "common/warn.h"
#include "task/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The one header line train.log gets at each launch, with the GPU warnings after it. */
static void log_header(struct wireup *w)
{
	const struct alloc *a = &w->a;
	const char *restart = getenv(ENV_SLURM_RESTART_COUNT);
	const char *warnings[] = {w->gpu_self, w->gpu_all};
	char when[LAUNCH_TIME_MAX];
	int i, used;

	launch_utc_now(when);
	used = snprintf(w->header, sizeof(w->header),
			"=== dptrain-launch %s: rank %d of %d on %s (node %d, local rank %d), "
			"job %s step %s, restart %s, source %s:",
			when, a->rank, a->world_size, a->ranks[a->rank].host, a->node_rank,
			a->local_rank, a->job_id, a->step_id, restart ? restart : "0",
			alloc_source_name(a->source));
	for (i = 0; w->cmd[i] && used > 0 && used < (int)sizeof(w->header) - 8; i++)
		used +=
		    snprintf(w->header + used, sizeof(w->header) - (size_t)used, " %s", w->cmd[i]);
	for (i = 0; i < 2; i++)
		if (warnings[i][0] && used > 0 && used < (int)sizeof(w->header) - 1) {
			w->header[used++] = '\n';
			used += dp_warn_format(w->header + used, sizeof(w->header) - (size_t)used,
					       "dptrain-launch", w->ident, "%s", warnings[i]);
		}
}

int wireup_command(struct wireup *w, struct dp_error *err)
{
	struct launch_exec *ex = &w->ex;
	const struct wireup_settings *st = &w->st;
	const char *trainer = getenv(ENV_DPTRAIN_TRAINER);
	int tee;

	memset(ex, 0, sizeof(*ex));
	ex->argv = w->cmd;
	ex->ident = w->ident;
	if (strcmp(w->cmd[0], "dptrain") == 0 && trainer && *trainer)
		ex->path = trainer;
	/* The bundled trainer takes SIGTERM/SIGUSR1 from its first instruction: hand it the
	 * mask, and a request that came meanwhile, pending. Any other command gets them as it
	 * would without us. */
	ex->stop = &w->stop;
	ex->pass_stop = cfg_is_trainer_command(w->cmd[0]);
	if (st->run_in_device_dir)
		ex->cwd = w->paths.devdir;
	/* msrun starts the scheduler where the master is: rank 0's node */
	if (st->ms_dynamic && w->a.rank == 0) {
		snprintf(w->sched_log, sizeof(w->sched_log), "%s/scheduler.log", w->paths.outdir);
		ex->sched_log = w->sched_log;
	}
	tee =
	    st->console == CFG_CONSOLE_ALL || (st->console == CFG_CONSOLE_RANK0 && w->a.rank == 0);
	/* The bundled trainer takes DPTRAIN_GPU; any other command may index by LOCAL_RANK. */
	w->gpu_self[0] = w->gpu_all[0] = '\0';
	if (!ex->pass_stop && alloc_gpu_advice(&w->a, w->gpu_self, sizeof(w->gpu_self), w->gpu_all,
					       sizeof(w->gpu_all)) != 0)
		return errprintf(err, "out of memory");
	if (w->gpu_all[0])
		dp_warn("dptrain-launch", w->ident, "%s", w->gpu_all);
	if (st->per_rank_logs) {
		snprintf(w->train_log, sizeof(w->train_log), "%s/train.log", w->paths.devdir);
		ex->train_log = w->train_log;
		ex->tee = tee;
		log_header(w);
		ex->header = w->header;
	}
	rt_free(&w->rt);
	alloc_free(&w->a);
	return 0;
}

/* The plugin's helper: the task runs the command; say what it needs. */
static int answer_plugin(struct wireup *w, struct dp_error *err)
{
	const struct launch_exec *ex = &w->ex;
	int fd = w->wire_fd;

	if (launch_wire_send_env(fd, w->env0, err) != 0)
		return -1;
	if (ex->train_log) {
		int log = launch_open_log(ex);
		if (log < 0)
			return 1;
		close(log);
		if (launch_wire_put(fd, WIRE_LOG, ex->train_log, err) != 0 ||
		    launch_wire_put(fd, WIRE_TEE, ex->tee ? "1" : "0", err) != 0)
			return -1;
	}
	if (launch_wire_put(fd, WIRE_STOP_BLOCKED, ex->pass_stop ? "1" : "0", err) != 0 ||
	    (ex->cwd && launch_wire_put(fd, WIRE_CWD, ex->cwd, err) != 0) ||
	    (ex->sched_log && launch_wire_put(fd, WIRE_SCHED_LOG, ex->sched_log, err) != 0) ||
	    (w->lock_fd >= 0 && launch_wire_put_fd(fd, WIRE_LOCK, w->lock_fd, err) != 0) ||
	    launch_wire_put(fd, WIRE_END, "", err) != 0)
		return -1;
	close(fd);
	w->wire_fd = -1;
	launch_wire_snapshot_free(w->env0);
	w->env0 = NULL;
	return 0;
}

int wireup_hand_over(struct wireup *w, struct dp_error *err)
{
	if (w->wire_fd >= 0)
		return answer_plugin(w, err);
	/* the command holds the output directory's lock until it ends */
	if (w->lock_fd >= 0 && fcntl(w->lock_fd, F_SETFD, 0) != 0)
		return errprintf(err, "cannot pass on the output directory's lock: %s",
				 strerror(errno));
	return launch_exec(&w->ex);
}
