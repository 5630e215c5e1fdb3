/* local_run.c — dptrain-run's phases (local_run.h): the config checked, the run made a job,
 * its ranks started through dptrain-launch, each in a process group of its own, and waited
 * for. Owns the ranks' process groups; what each rank does is dptrain-launch's. */
#define _GNU_SOURCE /* sigabbrev_np */
#include "launcher/local_run.h"
#include "common/env.h"
#include "common/errfile.h"
#include "common/mkdir_p.h"
#include "common/secret.h"
#include "common/warn.h"
#include "launcher/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void local_run_init(struct local_run *r)
{
	memset(r, 0, sizeof(*r));
	r->grace_s = LOCAL_RUN_GRACE_S;
	r->port_fd = r->lock_fd = -1;
	r->failed = -1;
}

static int set(const char *name, const char *value, struct dp_error *err)
{
	if (setenv(name, value, 1) != 0)
		return errprintf(err, "cannot set %s: %s", name, strerror(errno));
	return 0;
}

static int set_int(const char *name, long value, struct dp_error *err)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%ld", value);
	return set(name, buf, err);
}

/* A program installed next to this one, else NULL. */
static char *sibling(const char *name)
{
	char self[LAUNCH_PATH_MAX], path[LAUNCH_PATH_MAX + 64];
	ssize_t n;

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return NULL;
	self[n] = '\0';
	snprintf(path, sizeof(path), "%s/%s", dirname(self), name);
	return access(path, X_OK) == 0 ? strdup(path) : NULL;
}

int local_run_config(struct local_run *r, struct dp_error *err)
{
	const char *s;
	int bundled = cfg_is_trainer_command(r->cmd[0]);

	memset(&r->c, 0, sizeof(r->c));
	if (r->cfg_path) {
		if ((bundled ? cfg_load(&r->c, r->cfg_path, 0, NULL, err)
			     : cfg_load_launch(&r->c, r->cfg_path, err)) != 0 ||
		    set(ENV_DPTRAIN_CONFIG, r->c.path, err) != 0)
			return -1;
	} else {
		unsetenv(ENV_DPTRAIN_CONFIG); /* one from an outer job is not this run's */
	}
	r->per_rank_logs = r->cfg_path ? r->c.output.per_rank_logs : 1; /* the launcher's default */
	s = getenv(ENV_DPTRAIN_OUTPUT_DIR);
	snprintf(r->pattern, sizeof(r->pattern), "%s",
		 r->outdir_opt			       ? r->outdir_opt
		 : s && *s			       ? s
		 : r->c.output.dir && *r->c.output.dir ? r->c.output.dir
						       : LAUNCH_DEFAULT_OUTDIR);
	return 0;
}

int local_run_programs(struct local_run *r, struct dp_error *err)
{
	r->launcher = sibling("dptrain-launch");
	if (!r->launcher)
		return errprintf(
		    err,
		    "dptrain-launch is not installed next to dptrain-run (in the same directory)");
	r->trainer = sibling("dptrain");
	if (r->trainer && !getenv(ENV_DPTRAIN_TRAINER))
		return set(ENV_DPTRAIN_TRAINER, r->trainer, err);
	return 0;
}

int local_run_job(struct local_run *r, struct dp_error *err)
{
	char node[RT_HOST_MAX];

	snprintf(r->job, sizeof(r->job), "local.%ld", (long)getpid());
	alloc_hostname(node);
	if (launch_outdir_expand(r->pattern, r->job, "0", node, r->outdir, err) != 0)
		return -1;
	/* held until the ranks are done: no other program takes it before rank 0 binds it */
	if (alloc_port_hold("127.0.0.1", &r->port, &r->port_fd, err) != 0)
		return -1;
	return set(ENV_DPTRAIN_SOURCE, "env", err) || set(ENV_DPTRAIN_JOB_ID, r->job, err) ||
		       set(ENV_DPTRAIN_STEP_ID, "0", err)
		   ? -1
		   : 0;
}

int local_run_outdir(struct local_run *r, struct dp_error *err)
{
	char canon[LAUNCH_PATH_MAX], who[LAUNCH_PATH_MAX + 128], when[LAUNCH_TIME_MAX];

	if (dp_mkdir_p(r->outdir, 0755, err) != 0 || launch_dir_safe(r->outdir, canon, err) != 0)
		return -1;
	snprintf(r->outdir, sizeof(r->outdir), "%s", canon);
	if (set(ENV_DPTRAIN_OUTPUT_DIR, r->outdir, err) != 0)
		return -1;
	launch_utc_now(when);
	snprintf(who, sizeof(who), "dptrain-run pid %ld (job %s), since %s", (long)getpid(), r->job,
		 when);
	switch (launch_outdir_lock(r->outdir, who, &r->lock_fd, err)) {
	case 0:
		if (fcntl(r->lock_fd, F_SETFD, 0) != 0)
			return errprintf(err, "cannot pass on the output directory's lock: %s",
					 strerror(errno));
		return set_int(ENV_DPTRAIN_LOCK_FD, r->lock_fd, err);
	case 1:
		dp_warn("dptrain-run", NULL, "%s", err->text);
		return 0;
	default:
		return -1;
	}
}

int local_run_environment(struct local_run *r, struct dp_error *err)
{
	char secret[DP_SECRET_LEN + 1];

	if (set_int(ENV_WORLD_SIZE, r->nranks, err) ||
	    set_int(ENV_LOCAL_WORLD_SIZE, r->nranks, err) || set(ENV_NODE_RANK, "0", err) ||
	    set(ENV_GROUP_RANK, "0", err) || set(ENV_MASTER_ADDR, "127.0.0.1", err) ||
	    set_int(ENV_MASTER_PORT, r->port, err))
		return -1;
	/* this run's secret: another user's program on 127.0.0.1 cannot join the ranks */
	if (dp_secret_make(secret, err) != 0 || set(ENV_DPTRAIN_STORE_SECRET, secret, err) != 0)
		return -1;
	if (r->timeout_opt && set(ENV_DPTRAIN_TIMEOUT, r->timeout_opt, err) != 0)
		return -1;
	if (r->verbose)
		fprintf(stderr,
			"dptrain-run: %d ranks of '%s', master 127.0.0.1:%d, output in %s\n",
			r->nranks, r->cmd[0], r->port, r->outdir);
	return 0;
}

/* In the rank's process, after the fork: what dptrain-run cannot do for it then is said, and
 * the rank ends. */
static void child_set(const char *name, long value)
{
	struct dp_error err;

	if (set_int(name, value, &err) != 0) {
		fprintf(stderr, "dptrain-run: %s\n", err.text);
		exit(1);
	}
}

static pid_t start_rank(struct local_run *r, int rank, struct dp_error *err)
{
	char **argv;
	pid_t pid, parent = getpid();
	sigset_t stop;
	int i, n, fd;

	for (n = 0; r->cmd[n]; n++)
		;
	argv = calloc((size_t)n + 3, sizeof(char *));
	if (!argv)
		return errprintf(err, "out of memory");
	argv[0] = r->launcher;
	argv[1] = "--";
	for (i = 0; i < n; i++)
		argv[i + 2] = r->cmd[i];
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		free(argv);
		return errprintf(err, "cannot start rank %d: fork: %s", rank, strerror(errno));
	}
	if (pid == 0) {
		/* Own process group: dptrain-run signals a rank and whatever it started at once. */
		setpgid(0, 0);
		child_set(ENV_RANK, rank);
		child_set(ENV_LOCAL_RANK, rank);
		fd = open("/dev/null", O_RDONLY);
		if (fd >= 0 && fd != STDIN_FILENO) {
			dup2(fd, STDIN_FILENO);
			close(fd);
		}
		/* The rank goes when we go, even by SIGKILL: a trainer checkpoints and stops. */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
			_exit(1);
		/* The stop signals stay blocked through the exec: dptrain-launch takes them from
		 * its first instruction, and one that comes before that waits for it. */
		stop = r->oldmask;
		sigaddset(&stop, SIGTERM);
		sigaddset(&stop, SIGUSR1);
		sigprocmask(SIG_SETMASK, &stop, NULL);
		execv(r->launcher, argv);
		fprintf(stderr, "dptrain-run: rank %d: cannot run %s: %s\n", rank, r->launcher,
			strerror(errno));
		_exit(launch_exec_status(errno));
	}
	setpgid(pid, pid); /* also here: whichever runs first, the group exists before a kill */
	free(argv);
	return pid;
}

int local_run_start(struct local_run *r, struct dp_error *err)
{
	int rank;

	r->ranks = calloc((size_t)r->nranks, sizeof(*r->ranks));
	if (!r->ranks)
		return errprintf(err, "out of memory");
	/* Signals are taken synchronously (sigtimedwait) in local_run_wait. */
	sigemptyset(&r->block);
	sigaddset(&r->block, SIGCHLD);
	sigaddset(&r->block, SIGINT);
	sigaddset(&r->block, SIGTERM);
	sigaddset(&r->block, SIGHUP);
	sigaddset(&r->block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &r->block, &r->oldmask);
	for (rank = 0; rank < r->nranks; rank++) {
		pid_t pid = start_rank(r, rank, err);
		if (pid < 0)
			return -1;
		r->ranks[rank].pid = r->ranks[rank].pgid = pid;
		r->alive++;
	}
	return 0;
}

static void signal_all(struct local_run *r, int sig)
{
	int rank;

	for (rank = 0; rank < r->nranks; rank++)
		if (r->ranks[rank].pid > 0)
			kill(-r->ranks[rank].pid, sig);
}

/* Exit status a shell would show for a wait status. */
static int shell_status(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

static void describe(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "ended with wait status 0x%x", status);
}

/* A rank's end that is not what was asked of it: 0, or 4 (stopped on request) once the ranks
 * were told to stop. */
static int crashed(int status, int interrupted)
{
	return !(WIFEXITED(status) &&
		 (WEXITSTATUS(status) == 0 || (interrupted && WEXITSTATUS(status) == 4)));
}

/* Rank `rank` ended with `status`: named when it crashed (or with -v), the others stopped
 * when it is the first to fail; the exit status and the SIGKILL deadline updated. */
static void rank_ended(struct local_run *r, int rank, int status, int *exit_code, time_t *kill_at)
{
	/* Every crash is named, stopped or not, and the first one decides the exit status. A
	 * rank that stops as asked (4 after a stop request) is no failure: the others may still
	 * be writing the checkpoint. */
	int bad = crashed(status, r->interrupted);
	char what[128];

	r->ranks[rank].pid = 0;
	r->ranks[rank].status = status;
	r->alive--;
	if (r->verbose || bad) {
		struct launch_paths rp; /* the rank's, as its launcher made them */
		struct dp_error err;
		char rec[768];

		describe(status, what, sizeof(what));
		fprintf(stderr, "dptrain-run: rank %d %s", rank, what);
		if (bad && r->per_rank_logs)
			fprintf(stderr, " (its output: %s/device%d/train.log)", r->outdir, rank);
		if (bad && launch_paths_init(&rp, r->outdir, rank, &err) == 0 &&
		    dp_errfile_message(rp.errfile, rec, sizeof(rec)))
			fprintf(stderr, "; it recorded: %s (the traceback is in %s)", rec,
				rp.errfile);
	}
	if (bad && r->failed < 0) {
		r->failed = rank;
		*exit_code = shell_status(status);
		if (!r->interrupted && r->alive)
			fprintf(stderr, "; stopping the other %d rank%s", r->alive,
				r->alive > 1 ? "s" : "");
		signal_all(r, SIGTERM);
		*kill_at = time(NULL) + r->grace_s;
	} else if (r->failed < 0 && status != 0) {
		*exit_code = shell_status(status); /* 4: stopped on request */
	}
	if (r->verbose || bad)
		fputc('\n', stderr);
}

int local_run_wait(struct local_run *r)
{
	struct timespec wait_ts;
	siginfo_t info;
	time_t kill_at = 0;
	int exit_code = 0, sig, rank;

	while (r->alive > 0) {
		pid_t pid;
		int status;

		/* Reap first: a SIGCHLD may stand for several children. */
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
			for (rank = 0; rank < r->nranks && r->ranks[rank].pid != pid; rank++)
				;
			if (rank < r->nranks)
				rank_ended(r, rank, status, &exit_code, &kill_at);
		}
		if (r->alive == 0)
			break;
		if (kill_at) {
			time_t left = kill_at - time(NULL);
			if (left <= 0) {
				fprintf(stderr,
					"dptrain-run: %d rank%s still running %d s after SIGTERM; "
					"sending SIGKILL\n",
					r->alive, r->alive > 1 ? "s" : "", r->grace_s);
				signal_all(r, SIGKILL);
				kill_at = 0;
				continue;
			}
			wait_ts.tv_sec = left;
			wait_ts.tv_nsec = 0;
			sig = sigtimedwait(&r->block, &info, &wait_ts);
		} else {
			sig = sigwaitinfo(&r->block, &info);
		}
		if (sig < 0 || sig == SIGCHLD)
			continue;
		/* SIGINT/SIGTERM/SIGHUP: the ranks decide how to end (a trainer checkpoints). */
		if (!r->interrupted)
			fprintf(stderr, "dptrain-run: got SIG%s: passing it to all ranks\n",
				sigabbrev_np(sig));
		r->interrupted = 1;
		signal_all(r, sig);
	}
	return exit_code;
}

void local_run_end(struct local_run *r)
{
	int rank;

	/* Whatever a failed or stopped rank left behind in its process group goes too. */
	if (r->ranks && (r->failed >= 0 || r->interrupted))
		for (rank = 0; rank < r->nranks; rank++)
			kill(-r->ranks[rank].pgid, SIGKILL);
	if (r->port_fd >= 0)
		close(r->port_fd);
	free(r->ranks);
	free(r->launcher);
	free(r->trainer);
	cfg_free(&r->c);
	r->ranks = NULL;
	r->launcher = r->trainer = NULL;
	r->port_fd = -1;
}
