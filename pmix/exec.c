/* exec.c — the last step of dptrain-launch: stdout/stderr into the rank's train.log (appended,
 * one header line per launch, so a requeued job keeps its history), optionally also on the
 * console, then exec of the command. Owns the tee; must not touch the environment. */
#define _GNU_SOURCE /* qsort_r, pipe2, mkostemp */
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* Signals the tee ignores: Slurm signals every process of the step and dptrain-run the whole
 * process group, so the command gets them itself; the tee must outlive it to copy its last
 * lines, and forwarding would deliver them twice. */
static const int tee_ignored[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE};
#define NIGNORED (sizeof(tee_ignored) / sizeof(tee_ignored[0]))

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

static int open_log(const struct launch_exec *e)
{
	int fd;

	fd = open(e->train_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "dptrain-launch: %s: cannot open %s: %s\n", e->ident, e->train_log,
			strerror(errno));
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

/* Copy the command's output to train.log and the console until it exits. If our parent
 * (dptrain-run, slurmstepd) dies meanwhile, the command gets one SIGTERM, as it would have
 * from there: we ignore the signals, so PR_SET_PDEATHSIG alone would not reach it. */
static void tee_loop(pid_t child, int out_r, int err_r, int log_fd, const char *ident,
		     const char *log_path, pid_t parent)
{
	struct pollfd pf[2] = {{out_r, POLLIN, 0}, {err_r, POLLIN, 0}};
	const int console[2] = {STDOUT_FILENO, STDERR_FILENO};
	int console_ok[2] = {1, 1}, log_ok = 1, open_fds = 2, exited = 0, i;
	char buf[65536];

	while (open_fds > 0) {
		if (parent > 0 && getppid() != parent) {
			kill(child, SIGTERM);
			parent = 0;
		}
		/* Whoever the command started may hold the pipes open after it exits: once it
		 * has, copy only what is already buffered (non-blocking) and stop. */
		siginfo_t info;
		memset(&info, 0, sizeof(info));
		if (!exited &&
		    waitid(P_PID, (id_t)child, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
		    info.si_pid == child) {
			exited = 1;
			for (i = 0; i < 2; i++)
				if (pf[i].fd >= 0)
					fcntl(pf[i].fd, F_SETFL, O_NONBLOCK);
		}
		if (!exited && poll(pf, 2, 200) < 0 && errno != EINTR)
			break;
		for (i = 0; i < 2; i++) {
			ssize_t n;
			if (pf[i].fd < 0 ||
			    (!exited && !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))))
				continue;
			n = read(pf[i].fd, buf, sizeof(buf));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(pf[i].fd);
				pf[i].fd = -1;
				open_fds--;
				continue;
			}
			if (log_ok && launch_write_all(log_fd, buf, (size_t)n) != 0) {
				log_ok = 0;
				fprintf(stderr, "dptrain-launch: %s: cannot write %s: %s\n", ident,
					log_path, strerror(errno));
			}
			if (console_ok[i] && launch_write_all(console[i], buf, (size_t)n) != 0)
				console_ok[i] = 0;
		}
	}
	for (i = 0; i < 2; i++)
		if (pf[i].fd >= 0)
			close(pf[i].fd);
}

/* Leave the way the command did: same exit code, or death by the same signal. */
static void __attribute__((noreturn)) mirror_status(int status)
{
	struct rlimit no_core = {0, 0};
	sigset_t set;
	int sig;

	if (WIFEXITED(status))
		exit(WEXITSTATUS(status));
	sig = WTERMSIG(status);
	/* The command dumped core already if it was going to; one is enough. */
	setrlimit(RLIMIT_CORE, &no_core);
	signal(sig, SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	exit(128 + sig);
}

static int run_with_tee(const struct launch_exec *e, int log_fd)
{
	struct sigaction ign, old[NIGNORED];
	int out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, status, rc;
	size_t i;
	pid_t pid, parent = getppid(), tee = getpid();
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
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	for (i = 0; i < NIGNORED; i++)
		sigaction(tee_ignored[i], &ign, &old[i]);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "dptrain-launch: %s: fork: %s\n", e->ident, strerror(errno));
		return 1;
	}
	if (pid == 0) {
		/* The command gets the dispositions we were started with, not the tee's. */
		for (i = 0; i < NIGNORED; i++)
			sigaction(tee_ignored[i], &old[i], NULL);
		for (int sig = 1; e->stop && sig < NSIG; sig++)
			if (sigismember(e->stop, sig) == 1 && sigismember(&pending, sig) == 1)
				raise(sig); /* blocked: pending again, here */
		/* and if the tee dies, the command is told to stop */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != tee)
			_exit(1);
		if (dup2(out_p[1], STDOUT_FILENO) < 0 || dup2(err_p[1], STDERR_FILENO) < 0)
			_exit(126);
		_exit(do_exec(e, STDERR_FILENO, -1));
	}
	close(out_p[1]);
	close(err_p[1]);
	tee_loop(pid, out_p[0], err_p[0], log_fd, e->ident, e->train_log, parent);
	close(log_fd);
	do
		rc = waitpid(pid, &status, 0);
	while (rc < 0 && errno == EINTR);
	if (rc < 0) {
		fprintf(stderr, "dptrain-launch: %s: waitpid: %s\n", e->ident, strerror(errno));
		exit(1);
	}
	mirror_status(status);
}

int launch_exec(const struct launch_exec *e)
{
	int log_fd, console_err = -1, rc;

	fflush(NULL);
	if (!e->train_log)
		return do_exec(e, STDERR_FILENO, -1);
	log_fd = open_log(e);
	if (log_fd < 0)
		return 1;
	if (e->tee)
		return run_with_tee(e, log_fd);
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
