/* remote.c — the slurmstepd side of dptrain.so: decides once per step whether its tasks are
 * ranks of a dptrain job (user steps with --dptrain or DPTRAIN_CONFIG only; never the batch
 * script, extern or interactive step), then in each task's task_init runs dptrain-launch as a
 * helper (--wire-up: discovery, rank table, device directory), sets the variables it answers
 * in the task, points the task's output at train.log (copying it to the console where asked)
 * and returns: Slurm runs the command itself. Must never call PMIx (the task is a fork of
 * slurmstepd, which hosts the PMIx server in the same library: a client call hangs), execute
 * anything in the task's own process, write files, or wait without a limit. */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "common/clock.h"
#include "config/config.h"
#include "common/env.h"
#include "common/errfile.h"
#include "common/openfile.h"
#include "common/path_search.h"
#include "spank/plugin.h"
#include "task/sched.h"
#include "task/tee.h"
#include "task/wire.h"

/* Remember an error for task_init: failing here would fail the step with a message that
 * only reaches slurmd's log, while task_init's error reaches the user's srun. */
static int dp_remember_relative(struct dp_plugin *dp, const char *path)
{
	snprintf(dp->error, sizeof(dp->error),
		 "dptrain: the job config path '%s' is not absolute and srun did not export "
		 "%s (was the step started with --export=NONE?): give --dptrain an absolute path",
		 path, ENV_DPTRAIN_CONFIG);
	dp->active = 1;
	return 0;
}

static int dp_user_step(spank_t sp)
{
	uint32_t stepid;

	if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
		return 0;
	switch (stepid) {
	case SLURM_BATCH_SCRIPT: /* #SBATCH --dptrain reaches the script: it must run as is */
	case SLURM_EXTERN_CONT:
	case SLURM_INTERACTIVE_STEP:
	case SLURM_PENDING_STEP:
		return 0;
	default:
		return 1;
	}
}

int dp_remote_init_post_opt(struct dp_plugin *dp, spank_t sp)
{
	char env[PATH_MAX];
	int have_env;
	spank_err_t rc;

	dp->active = 0;
	dp->error[0] = '\0';
	if (!dp_user_step(sp))
		return 0;
	rc = spank_getenv(sp, ENV_DPTRAIN_CONFIG, env, sizeof(env));
	have_env = (rc == ESPANK_SUCCESS && *env) || rc == ESPANK_NOSPACE;
	if ((!dp->option && !have_env) || (dp->option && strcmp(dp->option, DP_OPTION_NONE) == 0))
		return 0; /* not a dptrain step: leave it exactly as it is */
	if (rc == ESPANK_NOSPACE && !(dp->option && dp->option[0] == '/')) {
		/* a value no path can have (srun --export=DPTRAIN_CONFIG=...): the step asked for
		 * dptrain, so it fails rather than run without it */
		snprintf(dp->error, sizeof(dp->error),
			 "dptrain: %s in the task's environment is longer than %zu bytes, longer "
			 "than a path can be: give the job config's path with --dptrain=FILE",
			 ENV_DPTRAIN_CONFIG, sizeof(env) - 1);
		dp->active = 1;
		return 0;
	}

	if (dp->args_error[0]) {
		snprintf(dp->error, sizeof(dp->error), "%.*s", (int)sizeof(dp->error) - 1,
			 dp->args_error);
		dp->active = 1;
		return 0;
	}
	/* srun exported the absolute path of --dptrain (or of DPTRAIN_CONFIG) in the job's
	 * environment after validating it; a relative option value is the user's spelling.
	 * --dptrain without a file: the wire-up alone, no config. */
	dp->config[0] = '\0';
	if (dp_option_nofile(dp->option)) {
		dp->active = 1;
		return 0;
	}
	if (dp->option && dp->option[0] == '/') {
		if (strlen(dp->option) >= sizeof(dp->config)) {
			snprintf(dp->error, sizeof(dp->error),
				 "dptrain: the job config path is longer than %zu characters",
				 sizeof(dp->config) - 1);
			dp->active = 1;
			return 0;
		}
		snprintf(dp->config, sizeof(dp->config), "%s", dp->option);
	} else if (have_env && env[0] == '/')
		snprintf(dp->config, sizeof(dp->config), "%s", env);
	else
		return dp_remember_relative(dp, dp->option ? dp->option : env);
	dp->active = 1;
	return 0;
}

static int dp_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
	spank_err_t rc = spank_setenv(sp, var, val, overwrite);

	if (rc != ESPANK_SUCCESS && !(rc == ESPANK_ENV_EXISTS && !overwrite)) {
		slurm_error("dptrain: cannot set %s in the task's environment: %s", var,
			    spank_strerror(rc));
		return -1;
	}
	return 0;
}

/* The launcher as the task will run it: absolute as configured, else found on the job's
 * PATH (a plugin built without DPTRAIN_BINDIR). */
static int dp_find_launcher(spank_t sp, const char *name, char *out, size_t outlen)
{
	char path[8192];

	return path_search(
	    name, spank_getenv(sp, "PATH", path, sizeof(path)) == ESPANK_SUCCESS ? path : NULL, out,
	    outlen);
}

static int dp_task_env(struct dp_plugin *dp, spank_t sp)
{
	const struct dp_args *a = &dp->args;

	if (dp->config[0] ? dp_setenv(sp, ENV_DPTRAIN_CONFIG, dp->config, 1)
			  : spank_unsetenv(sp, ENV_DPTRAIN_CONFIG) != ESPANK_SUCCESS)
		return -1;
	if (a->trainer[0] ? dp_setenv(sp, ENV_DPTRAIN_TRAINER, a->trainer, 1)
			  : spank_unsetenv(sp, ENV_DPTRAIN_TRAINER) != ESPANK_SUCCESS)
		return -1;
#if defined(DPTRAIN_PMIX_MAJOR) && DPTRAIN_PMIX_MAJOR < 5
	/* PMIx 4: without it a second PMIx client in the rank (OpenMPI's MPI_Init after the
	 * launcher's PMIx_Finalize) fails, the ds21 shared-memory store cannot be attached twice.
	 * Not with PMIx 5: its store (shmem2) takes a second client, and with hash alone the
	 * node-level data (PMIX_LOCAL_PEERS) is missing and OpenMPI 5's MPI_Init fails. */
	if (dp_setenv(sp, ENV_PMIX_MCA_gds, "hash", 1))
		return -1;
#endif
	if (a->output_dir[0] && dp_setenv(sp, ENV_DPTRAIN_OUTPUT_DIR, a->output_dir, 1))
		return -1;
	if (a->iface[0] && dp_setenv(sp, ENV_DPTRAIN_IFACE, a->iface, 1))
		return -1;
	if (a->timeout[0] && dp_setenv(sp, ENV_DPTRAIN_TIMEOUT, a->timeout, 1))
		return -1;
	/* The site's policy: the launcher and the trainer hold the job to it. */
	if (a->default_output_dir[0] &&
	    dp_setenv(sp, ENV_DPTRAIN_DEFAULT_OUTPUT_DIR, a->default_output_dir, 1))
		return -1;
	if (a->max_timeout[0] && dp_setenv(sp, ENV_DPTRAIN_MAX_TIMEOUT, a->max_timeout, 1))
		return -1;
	if (a->max_data_workers[0] &&
	    dp_setenv(sp, ENV_DPTRAIN_MAX_DATA_WORKERS, a->max_data_workers, 1))
		return -1;
	return 0;
}

/* The command `dptrain` that srun did not find on the submitting user's PATH: the trainer=
 * program, found through the task's PATH, which Slurm searches after task_init. */
static int dp_trainer_path(struct dp_plugin *dp, spank_t sp, const char *ident)
{
	const char *t = dp->args.trainer, *slash = strrchr(t, '/');
	char **argv = NULL, path[8192], *np;
	int argc = 0, rc;

	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1)
		return 0;
	/* srun refused it already; an srun without the plugin (another plugstack.conf on the
	 * submit host) did not */
	if (!t[0] && cfg_is_trainer_command(argv[0])) {
		slurm_error("dptrain: %s: %s", ident, DP_TRAINER_DISABLED_MSG);
		return -1;
	}
	if (strcmp(argv[0], "dptrain") != 0 || !slash)
		return 0;
	if (strcmp(slash + 1, "dptrain") != 0) {
		slurm_error("dptrain: %s: the command dptrain is not on PATH, and the trainer= "
			    "program %s cannot stand in for it (its name is not dptrain): give its "
			    "path on the command line",
			    ident, t);
		return -1;
	}
	if (spank_getenv(sp, "PATH", path, sizeof(path)) != ESPANK_SUCCESS)
		path[0] = '\0';
	if (asprintf(&np, "%.*s%s%s", (int)(slash - t), t, path[0] ? ":" : "", path) < 0)
		return -1;
	rc = dp_setenv(sp, "PATH", np, 1);
	free(np);
	return rc;
}

/* "rank 3 on n2", for messages: the task's rank and Slurm node as Slurm set them. */
static void dp_ident(spank_t sp, char *out, size_t outlen)
{
	char rank[32] = "?", node[256] = "";

	if (spank_getenv(sp, ENV_SLURM_PROCID, rank, sizeof(rank)) != ESPANK_SUCCESS)
		snprintf(rank, sizeof(rank), "?");
	/* The Slurm node name: emulated nodes share one hostname. */
	if (spank_getenv(sp, ENV_SLURMD_NODENAME, node, sizeof(node)) != ESPANK_SUCCESS)
		gethostname(node, sizeof(node) - 1);
	snprintf(out, outlen, "rank %s on %s", rank, node);
}

/* What the helper said (dptrain-launch --wire-up: its records, task/wire.h). */
struct dp_wire {
	char *buf; /* the records, as read */
	size_t len, cap;
	pid_t pid;
	int status;	       /* the helper's wait status, once reaped */
	int complete;	       /* its last record was WIRE_END */
	const char *log;       /* WIRE_LOG, or NULL */
	int tee, blocked;      /* WIRE_TEE, WIRE_STOP_BLOCKED */
	const char *cwd;       /* WIRE_CWD, or NULL */
	const char *sched_log; /* WIRE_SCHED_LOG, or NULL */
	int lock_fd; /* WIRE_LOCK: the output directory's lock (rank 0), held by the task; or -1 */
};

/* The names (comm, 15 characters at most) of the task's process during task_init and of the
 * watcher: anything but "slurmstepd", which proctrack/linuxproc never signals. */
#define DP_TASK_NAME	"dptrain-task"
#define DP_WATCH_NAME	"dptrain-watch"
#define DP_FIRST_WORD_S 90 /* until the helper says its limit (WIRE_LIMIT): it gives up at 60 */

/* Reap the helper within `secs` seconds, else kill it. */
static void dp_reap(struct dp_wire *w, double secs)
{
	if (tee_reap_within(w->pid, &w->status, secs))
		return;
	kill(w->pid, SIGKILL);
	while (waitpid(w->pid, &w->status, 0) < 0 && errno == EINTR)
		;
}

/* The helper given up on: its socket closed, itself killed and reaped. -1. */
static int dp_stop_helper(struct dp_wire *w, int fd)
{
	close(fd);
	kill(w->pid, SIGKILL);
	dp_reap(w, 10);
	return -1;
}

/* read(2) from the helper's socket, keeping the first descriptor it sends (close-on-exec)
 * in *keep and closing any other. */
static ssize_t dp_recv(int fd, char *buf, size_t len, int *keep)
{
	union {
		char b[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {buf, len};
	struct msghdr m;
	struct cmsghdr *c;
	ssize_t n;

	memset(&m, 0, sizeof(m));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = ctl.b;
	m.msg_controllen = sizeof(ctl.b);
	n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return n;
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		size_t i, k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < k; i++) {
			int got;

			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*keep < 0)
				*keep = got;
			else
				close(got);
		}
	}
	return n;
}

/* Run the helper with the task's environment and read its answer. 0, or -1 after saying why
 * (a helper that failed has said why itself; its status is in w->status). */
static int dp_run_helper(spank_t sp, const char *launcher, const char *ident, struct dp_wire *w)
{
	char **argv = NULL, **env = NULL, **nargv;
	char fdarg[32];
	int argc = 0, p[2], i, limit = -1;
	struct dp_error werr;
	double start = now_s();

	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS) {
		slurm_error("dptrain: %s: cannot read the task's command and environment", ident);
		return -1;
	}
	nargv = calloc((size_t)argc + 4, sizeof(*nargv));
	/* a socket, not a pipe: the lock comes back as a descriptor (SCM_RIGHTS) */
	if (!nargv || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) {
		slurm_error("dptrain: %s: cannot start the wire-up: %s", ident, strerror(errno));
		free(nargv);
		return -1;
	}
	w->pid = fork();
	if (w->pid == 0) {
		/* The helper's end as descriptor 3 (whatever the task had there is the task's,
		 * not the helper's), not close-on-exec. */
		if (p[1] != 3 && dup2(p[1], 3) < 0)
			_exit(126);
		if (p[1] == 3 && fcntl(3, F_SETFD, 0) < 0)
			_exit(126);
		snprintf(fdarg, sizeof(fdarg), "--wire-up=%d", 3);
		nargv[0] = (char *)launcher;
		nargv[1] = fdarg;
		nargv[2] = "--";
		for (i = 0; i < argc; i++)
			nargv[i + 3] = argv[i];
		execve(launcher, nargv, env);
		dprintf(STDERR_FILENO, "dptrain: %s: cannot execute the launcher %s: %s\n", ident,
			launcher, strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	free(nargv);
	close(p[1]);
	if (w->pid < 0) {
		slurm_error("dptrain: %s: cannot start the wire-up: %s", ident, strerror(errno));
		close(p[0]);
		return -1;
	}
	for (;;) {
		struct pollfd pf = {p[0], POLLIN, 0};
		double left = (limit < 0 ? DP_FIRST_WORD_S : limit + 30) - (now_s() - start);
		ssize_t n;

		if (left <= 0) {
			slurm_error("dptrain: %s: the wire-up (%s) did not finish within %d s; "
				    "stopped it",
				    ident, launcher, limit < 0 ? DP_FIRST_WORD_S : limit + 30);
			return dp_stop_helper(w, p[0]);
		}
		int ready = poll(&pf, 1, left > 60 ? 60000 : (int)(left * 1000) + 1);

		if (ready < 0 && errno != EINTR)
			break;
		if (ready <= 0)
			continue; /* the deadline is checked above; read only what is there */
		if (w->len + 65536 > w->cap) {
			char *nb;

			if (w->cap >= WIRE_MAX_BYTES) {
				slurm_error("dptrain: %s: the wire-up sent more than %d bytes",
					    ident, WIRE_MAX_BYTES);
				return dp_stop_helper(w, p[0]);
			}
			nb = realloc(w->buf, w->cap + 65536);
			if (!nb)
				break;
			w->buf = nb;
			w->cap += 65536;
		}
		n = dp_recv(p[0], w->buf + w->len, w->cap - w->len - 1, &w->lock_fd);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break;
		w->len += (size_t)n;
		/* The first record says the helper's limit and version: one of another version
		 * is refused before anything else it sends is read. */
		if (limit < 0 && wire_check_first(w->buf, w->len, launcher, &limit, &werr) < 0) {
			slurm_error("dptrain: %s: %s", ident, werr.text);
			return dp_stop_helper(w, p[0]);
		}
	}
	close(p[0]);
	dp_reap(w, 10);
	return 0;
}

/* The records, applied to the task: its variables. Remembers the rest for dp_output. */
static int dp_apply(spank_t sp, const char *launcher, const char *ident, struct dp_wire *w)
{
	struct wire_rec r;
	size_t off = 0;
	char *eq;

	while (wire_next(w->buf, w->len, &off, &r)) {
		switch (r.kind) {
		case WIRE_LIMIT: /* read by dp_run_helper */
		case WIRE_LOCK:	 /* its descriptor came with it (dp_recv) */
			break;
		case WIRE_ENV:
			eq = strchr(r.value, '=');
			if (!eq || eq == r.value)
				continue;
			*eq = '\0';
			if (dp_setenv(sp, r.value, eq + 1, 1) < 0)
				return -1;
			break;
		case WIRE_LOG:
			w->log = r.value;
			break;
		case WIRE_TEE:
			w->tee = r.value[0] == '1';
			break;
		case WIRE_STOP_BLOCKED:
			w->blocked = r.value[0] == '1';
			break;
		case WIRE_CWD:
			w->cwd = r.value;
			break;
		case WIRE_SCHED_LOG:
			w->sched_log = r.value;
			break;
		case WIRE_END:
			w->complete = 1;
			break;
		default:
			slurm_error(
			    "dptrain: %s: the launcher %s sent a record this plugin does not "
			    "know (kind byte %u) in wire-up protocol %d: install the same "
			    "dptrain version of plugin and launcher on every node",
			    ident, launcher, (unsigned char)r.kind, WIRE_VERSION);
			return -1;
		}
	}
	if (!w->complete) {
		slurm_error("dptrain: %s: the wire-up ended without its answer", ident);
		return -1;
	}
	return 0;
}

/* A status that means the rank failed, so the step must end: an error exit (not 4, the
 * bundled trainer's "stopped, checkpoint written"), or death by a signal that is not a stop
 * request (Slurm's SIGTERM/SIGINT at preemption, scancel or a time limit must let the other
 * ranks finish their checkpoints). */
static int dp_failed(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 4;
	switch (WTERMSIG(status)) {
	case SIGTERM:
	case SIGINT:
	case SIGHUP:
	case SIGUSR1:
	case SIGUSR2:
	case SIGPIPE:
		return 0;
	default:
		return 1;
	}
}

/* End the step after this rank failed: dptrain-launch --abort (PMIx_Abort) in a process of
 * its own, not waited for, so this task's status reaches Slurm at once. */
static void dp_end_step(const char *launcher, char **env, const char *ident, int status)
{
	char code[32], msg[1536], what[128], cause[1024] = "", recorded[768];
	const char *errfile = NULL;
	pid_t pid;

	if (WIFEXITED(status))
		snprintf(what, sizeof(what), "exited with status %d", WEXITSTATUS(status));
	else
		snprintf(what, sizeof(what), "was killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	/* The root cause, where the rank recorded it (PyTorch's @record): said once, here. */
	for (char **e = env; e && *e && !errfile; e++)
		if (dp_env_is(*e, ENV_TORCHELASTIC_ERROR_FILE))
			errfile = *e + sizeof(ENV_TORCHELASTIC_ERROR_FILE);
	if (errfile && dp_errfile_message(errfile, recorded, sizeof(recorded)))
		snprintf(cause, sizeof(cause), " (it recorded: %s; the traceback is in %s)",
			 recorded, errfile);
	snprintf(msg, sizeof(msg), "dptrain: %s: the command %s%s; ending the step", ident, what,
		 cause);
	snprintf(code, sizeof(code), "--abort=%d",
		 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	dprintf(STDERR_FILENO, "%s\n", msg);
	pid = fork();
	if (pid == 0) {
		char *argv[] = {(char *)launcher, code, msg, NULL};

		execve(launcher, argv, env);
		_exit(127);
	}
}

/* The task's output into train.log, and the rank's watch. Where the output also goes to the
 * console, or where a failed rank can end the step (PMIx), the task's process forks: the
 * child returns to Slurm, which runs the command in it, while this process (the task's pid,
 * which Slurm waits for) copies the output, and when the command fails ends the whole step
 * (as srun -K would, for any command), then leaves with the command's status. Returns in the
 * command's process only. */
static int dp_output(const char *ident, const struct dp_wire *w, const sigset_t *stop,
		     const char *launcher, char **argv, char **env, int can_end_step)
{
	struct sigaction old[TEE_NIGNORED];
	int fd = -1, out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, status;
	pid_t pid, parent = getppid(), watcher = getpid(), sched = 0;
	sigset_t pending;

	if (w->cwd && chdir(w->cwd) != 0) {
		slurm_error("dptrain: %s: cannot change to %s: %s", ident, w->cwd, strerror(errno));
		return -1;
	}
	if (w->log) {
		/* The user's own file, which the helper made; whatever replaced it since (a FIFO,
		 * a device, a link) is refused without blocking: a task stuck in open(2) here is
		 * one Slurm cannot end */
		struct dp_error oerr;
		fd = dp_open_regular(w->log, O_WRONLY | O_APPEND, 0, DP_OPEN_MINE, NULL, &oerr);
		if (fd < 0) {
			slurm_error("dptrain: %s: %s", ident, oerr.text);
			return -1;
		}
	}
	if (!(w->log && w->tee) && !can_end_step && !w->sched_log) {
		/* no watcher: the command itself holds the output directory's lock */
		if (w->lock_fd >= 0 && fcntl(w->lock_fd, F_SETFD, 0) != 0) {
			slurm_error("dptrain: %s: cannot keep the output directory's lock: %s",
				    ident, strerror(errno));
			close(fd);
			return -1;
		}
		if (fd >= 0 && (dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)) {
			slurm_error("dptrain: %s: cannot send the output to %s: %s", ident, w->log,
				    strerror(errno));
			close(fd);
			return -1;
		}
		if (fd >= 0)
			close(fd);
		return 0;
	}
	if (w->log && w->tee && (pipe2(out_p, O_CLOEXEC) != 0 || pipe2(err_p, O_CLOEXEC) != 0)) {
		slurm_error("dptrain: %s: pipe: %s", ident, strerror(errno));
		close(fd);
		return -1;
	}
	sigpending(&pending); /* a stop request meanwhile: the child does not inherit it */
	fflush(NULL);
	/* The watcher is a fork of slurmstepd that never execs: under its own name, so that
	 * proctrack/linuxproc, which spares every process named slurmstepd, signals it like the
	 * rest of the step (a stopped or stuck watcher otherwise outlives scancel, and Slurm
	 * drains the node: "Kill task failed"). Named before the fork: the command, which Slurm
	 * may exec before the watcher is scheduled again, never sees it under another name. */
	prctl(PR_SET_NAME, DP_WATCH_NAME);
	pid = fork();
	if (pid < 0) {
		slurm_error("dptrain: %s: fork: %s", ident, strerror(errno));
		prctl(PR_SET_NAME, DP_TASK_NAME);
		return -1;
	}
	if (pid == 0) {
		int o = out_p[1] >= 0 ? out_p[1] : fd, e = err_p[1] >= 0 ? err_p[1] : fd;

		prctl(PR_SET_NAME, DP_TASK_NAME); /* until Slurm execs the command */
		tee_raise_pending(stop, &pending);
		/* if the watcher dies, the command is told to stop */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != watcher)
			_exit(1);
		if (o >= 0 && (dup2(o, STDOUT_FILENO) < 0 || dup2(e, STDERR_FILENO) < 0))
			_exit(126);
		/* all of ours are close-on-exec: the command inherits none of them (the lock stays
		 * with the watcher, until the command has ended) */
		return 0;
	}
	if (out_p[1] >= 0) {
		close(out_p[1]);
		close(err_p[1]);
	}
	/* MindSpore's scheduler: the watcher's child, not the command's */
	if (w->sched_log && (sched = sched_start(argv, env, w->sched_log, ident)) < 0) {
		kill(pid, SIGKILL);
		fflush(NULL);
		_exit(1);
	}
	tee_ignore(old);
	tee_pass_pending(pid, stop, &pending);
	if (out_p[0] >= 0)
		tee_copy(pid, out_p[0], err_p[0], fd, ident, w->log, parent);
	if (fd >= 0)
		close(fd);
	if (tee_wait(pid, ident, &status) != 0) {
		fflush(NULL);
		_exit(1);
	}
	sched_finish(sched, WIFEXITED(status) && WEXITSTATUS(status) == 0, w->sched_log, ident);
	if (can_end_step && dp_failed(status))
		dp_end_step(launcher, env, ident, status);
	tee_leave(status);
}

/* The helper failed: the task leaves with its status (1 for an error, 4 for a stop request
 * during the wire-up, as the bundled trainer's), as if the launcher had been the task. */
static void __attribute__((noreturn)) dp_leave_as(int status)
{
	if (WIFEXITED(status))
		_exit(WEXITSTATUS(status) ? WEXITSTATUS(status) : 1);
	_exit(128 + WTERMSIG(status));
}

/* A --dptrain task that cannot be wired up ends here, in both plugstack.conf modes: Slurm
 * ignores a failing task_init of an "optional" plugin and would run the command without its
 * rank's environment. The message (already logged) reaches the user's srun. */
static void __attribute__((noreturn)) dp_fail_task(void)
{
	fflush(NULL);
	_exit(1);
}

int dp_remote_task_init(struct dp_plugin *dp, spank_t sp)
{
	char launcher[PATH_MAX], ident[300], pmix_rank[32], **env = NULL, **argv = NULL;
	int argc = 0;
	struct dp_wire w;
	sigset_t stop, old;
	int rc;

	if (!dp->active)
		return 0;
	/* This task's process is a fork of slurmstepd until Slurm execs the command, and
	 * proctrack/linuxproc never signals a process of that name: from here on it has its own,
	 * so that scancel ends it whatever it waits for (dp_output names the watcher). */
	prctl(PR_SET_NAME, DP_TASK_NAME);
	if (dp->error[0]) {
		slurm_error("%s", dp->error);
		dp_fail_task();
	}
	dp_ident(sp, ident, sizeof(ident));
	if (dp_task_env(dp, sp) < 0 || dp_trainer_path(dp, sp, ident) < 0)
		dp_fail_task();
	if (dp_find_launcher(sp, dp->args.launcher, launcher, sizeof(launcher)) < 0) {
		slurm_error("dptrain: the launcher %s cannot be executed (%s): %s; install "
			    "dptrain-launch there or set launcher= in plugstack.conf",
			    launcher, ident, strerror(errno));
		dp_fail_task();
	}
	slurm_verbose("dptrain: %s: wire-up by %s (config %s)", ident, launcher, dp->config);
	/* A stop request from now on waits: for the wire-up's verdict, then for the command. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGUSR1);
	sigprocmask(SIG_BLOCK, &stop, &old);
	memset(&w, 0, sizeof(w));
	w.lock_fd = -1;
	rc = dp_run_helper(sp, launcher, ident, &w);
	if (rc == 0 && (!WIFEXITED(w.status) || WEXITSTATUS(w.status) != 0)) {
		free(w.buf);
		dp_leave_as(w.status); /* the helper said why */
	}
	if (rc < 0 || dp_apply(sp, launcher, ident, &w) < 0 ||
	    spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS ||
	    dp_output(ident, &w, &stop, launcher, argv, env,
		      spank_getenv(sp, ENV_PMIX_RANK, pmix_rank, sizeof(pmix_rank)) ==
			  ESPANK_SUCCESS) < 0) {
		free(w.buf);
		dp_fail_task();
	}
	/* The bundled trainer takes SIGTERM/SIGUSR1 from its first instruction: it gets them
	 * blocked, and one that came meanwhile pending. Any other command gets them as it would
	 * without dptrain (a pending one is delivered now). */
	if (!w.blocked)
		sigprocmask(SIG_SETMASK, &old, NULL);
	free(w.buf);
	return 0;
}
