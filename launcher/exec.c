/* exec.c — the last step of dptrain-launch: stdout/stderr into the rank's train.log (appended,
 * one header line per launch, so a requeued job keeps its history), optionally also on the
 * console, then exec of the command. Owns the tee; must not touch the environment. */
#define _GNU_SOURCE /* qsort_r, pipe2, mkostemp */
#include "common/openfile.h"
#include "launcher/launcher.h"
#include "task/sched.h"
#include "task/tee.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int launch_exec_status(int errnum)
{
	return errnum == ENOENT || errnum == ENOTDIR ? 127 : 126;
}

/* exec, and on failure say why on `fd` (and on `fd2` when >= 0). Returns the exit status. */
static int do_exec(const struct launch_exec *e, int fd, int fd2)
{
	char msg[LAUNCH_PATH_MAX + 256];
	int n, errnum;

	if (e->stop && !e->pass_stop)
		sigprocmask(SIG_UNBLOCK, e->stop, NULL);
	if (e->path)
		execv(e->path, e->argv);
	else
		execvp(e->argv[0], e->argv);
	errnum = errno;
	n = snprintf(msg, sizeof(msg), "dptrain-launch: %s: cannot run '%s': %s\n", e->ident,
		     e->path ? e->path : e->argv[0], strerror(errnum));
	if (n > (int)sizeof(msg) - 1)
		n = (int)sizeof(msg) - 1;
	if (launch_write_all(fd, msg, (size_t)n) != 0 && fd2 < 0)
		fd2 = STDERR_FILENO;
	if (fd2 >= 0 && fd2 != fd)
		(void)launch_write_all(fd2, msg, (size_t)n);
	return launch_exec_status(errnum);
}

int launch_open_log(const struct launch_exec *e)
{
	struct dp_error err;
	int fd;

	/* The rank's own file, never what another program put in its place (a FIFO would hang
	 * the open until the wire-up's guard) */
	fd = dp_open_regular(e->train_log, O_WRONLY | O_CREAT | O_APPEND, 0644, DP_OPEN_MINE, NULL,
			     &err);
	if (fd < 0) {
		fprintf(stderr, "dptrain-launch: %s: %s\n", e->ident, err.text);
		return -1;
	}
	if (e->header) {
		size_t n = strlen(e->header);
		if (launch_write_all(fd, e->header, n) != 0 ||
		    (n && e->header[n - 1] != '\n' && launch_write_all(fd, "\n", 1) != 0)) {
			fprintf(stderr, "dptrain-launch: %s: cannot write %s: %s\n", e->ident,
				e->train_log, strerror(errno));
			close(fd);
			return -1;
		}
	}
	return fd;
}

/* The command as our child, we copy its output (tee.h) and leave with its status, after the
 * scheduler (sched, or 0) has ended. */
static int run_with_tee(const struct launch_exec *e, int log_fd, pid_t sched)
{
	struct sigaction old[TEE_NIGNORED];
	int out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
	pid_t pid, parent = getppid(), tee = getpid();
	int status;
	sigset_t pending;

	if (pipe2(out_p, O_CLOEXEC) != 0 || pipe2(err_p, O_CLOEXEC) != 0) {
		fprintf(stderr, "dptrain-launch: %s: pipe: %s\n", e->ident, strerror(errno));
		return 1;
	}
	/* A stop request that came during the wire-up is pending in this process: the child does
	 * not inherit it, and ignoring it here would discard it. Note it for the child. */
	sigemptyset(&pending);
	if (e->stop)
		sigpending(&pending);
	tee_ignore(old);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "dptrain-launch: %s: fork: %s\n", e->ident, strerror(errno));
		return 1;
	}
	if (pid == 0) {
		/* The command gets the dispositions we were started with, not the tee's. */
		tee_restore(old);
		tee_raise_pending(e->stop, &pending);
		/* and if the tee dies, the command is told to stop */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != tee)
			_exit(1);
		if (dup2(out_p[1], STDOUT_FILENO) < 0 || dup2(err_p[1], STDERR_FILENO) < 0)
			_exit(126);
		_exit(do_exec(e, STDERR_FILENO, -1));
	}
	close(out_p[1]);
	close(err_p[1]);
	tee_pass_pending(pid, e->stop, &pending);
	tee_copy(pid, out_p[0], err_p[0], log_fd, e->ident, e->train_log, parent);
	close(log_fd);
	if (tee_wait(pid, e->ident, &status) != 0) {
		fflush(NULL);
		_exit(1);
	}
	sched_finish(sched, WIFEXITED(status) && WEXITSTATUS(status) == 0, e->sched_log, e->ident);
	tee_leave(status);
}

int launch_exec(const struct launch_exec *e)
{
	int log_fd, console_err = -1, rc;
	pid_t sched = 0;

	fflush(NULL);
	if (e->cwd && chdir(e->cwd) != 0) {
		fprintf(stderr, "dptrain-launch: %s: cannot change to %s: %s\n", e->ident, e->cwd,
			strerror(errno));
		return 1;
	}
	/* Without the tee it stays the child of this process, which becomes the command: it
	 * then ends when the command does (its parent-death signal). */
	if (e->sched_log && (sched = sched_start(e->argv, environ, e->sched_log, e->ident)) < 0)
		return 1;
	if (!e->train_log)
		return do_exec(e, STDERR_FILENO, -1);
	log_fd = launch_open_log(e);
	if (log_fd < 0)
		return 1;
	if (e->tee)
		return run_with_tee(e, log_fd, sched);
	/* Keep the console's stderr (close-on-exec) to report a failed exec there too. */
	console_err = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	if (dup2(log_fd, STDOUT_FILENO) < 0 || dup2(log_fd, STDERR_FILENO) < 0) {
		fprintf(stderr, "dptrain-launch: %s: cannot redirect output to %s: %s\n", e->ident,
			e->train_log, strerror(errno));
		close(log_fd);
		return 1;
	}
	close(log_fd);
	rc = do_exec(e, STDERR_FILENO, console_err);
	if (console_err >= 0)
		close(console_err);
	return rc;
}
