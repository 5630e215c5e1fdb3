/* tee.c — copy a command's output to its rank's train.log and the console, then leave with
 * the command's status (tee.h). Must not decide where the log is or what the command is. */
#define _GNU_SOURCE
#include "task/tee.h"
#include "common/atomic_file.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const int tee_ignored[TEE_NIGNORED] = {SIGINT,  SIGTERM, SIGHUP, SIGQUIT,
					      SIGUSR1, SIGUSR2, SIGPIPE};

void tee_ignore(struct sigaction *old)
{
	struct sigaction ign;
	sigset_t blocked;
	int i;

	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	sigprocmask(SIG_BLOCK, NULL, &blocked);
	for (i = 0; i < TEE_NIGNORED; i++) {
		/* A blocked one (the stop signals) cannot end the tee anyway; ignoring it would
		 * discard one already pending, which tee_pass_pending still has to hand on. */
		if (sigismember(&blocked, tee_ignored[i]) == 1)
			sigaction(tee_ignored[i], NULL, &old[i]);
		else
			sigaction(tee_ignored[i], &ign, &old[i]);
	}
}

void tee_raise_pending(const sigset_t *stop, const sigset_t *pending)
{
	int sig;

	for (sig = 1; stop && sig < NSIG; sig++)
		if (sigismember(stop, sig) == 1 && sigismember(pending, sig) == 1)
			/* to the process, not raise(): a signal pending on this thread alone
			 * stays the main thread's after the exec, where the command's signal
			 * thread (the trainer's sigwaitinfo) never sees it */
			kill(getpid(), sig);
}

void tee_pass_pending(pid_t child, const sigset_t *stop, const sigset_t *before)
{
	sigset_t now;
	int sig;

	if (!stop || sigpending(&now) != 0)
		return;
	for (sig = 1; sig < NSIG; sig++)
		if (sigismember(stop, sig) == 1 && sigismember(&now, sig) == 1 &&
		    sigismember(before, sig) != 1)
			kill(child, sig);
}

void tee_restore(const struct sigaction *old)
{
	int i;

	for (i = 0; i < TEE_NIGNORED; i++)
		sigaction(tee_ignored[i], &old[i], NULL);
}

void tee_copy(pid_t child, int out_r, int err_r, int log_fd, const char *ident,
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
			if (log_ok && af_write_fd(log_fd, buf, (size_t)n) != 0) {
				log_ok = 0;
				fprintf(stderr, "dptrain: %s: cannot write %s: %s\n", ident,
					log_path, strerror(errno));
			}
			if (console_ok[i] && af_write_fd(console[i], buf, (size_t)n) != 0)
				console_ok[i] = 0;
		}
	}
	for (i = 0; i < 2; i++)
		if (pf[i].fd >= 0)
			close(pf[i].fd);
}

int tee_reap_within(pid_t child, int *status, double secs)
{
	double end = now_s() + secs;
	int pfd = (int)syscall(SYS_pidfd_open, child, 0), done = 0;
	pid_t r;

	for (;;) {
		r = waitpid(child, status, WNOHANG);
		if (r == child || (r < 0 && errno != EINTR)) {
			done = 1;
			break;
		}
		if (now_s() >= end)
			break;
		if (pfd >= 0) {
			struct pollfd pf = {pfd, POLLIN, 0};
			(void)poll(&pf, 1, ms_until(end));
		} else {
			usleep(5000);
		}
	}
	if (pfd >= 0)
		close(pfd);
	return done;
}

int tee_wait(pid_t child, const char *ident, int *status)
{
	int rc;

	do
		rc = waitpid(child, status, 0);
	while (rc < 0 && errno == EINTR);
	if (rc < 0) {
		fprintf(stderr, "dptrain: %s: waitpid: %s\n", ident, strerror(errno));
		return -1;
	}
	return 0;
}

void tee_leave(int status)
{
	struct rlimit no_core = {0, 0};
	sigset_t set;
	int sig;

	fflush(NULL);
	if (WIFEXITED(status))
		_exit(WEXITSTATUS(status));
	sig = WTERMSIG(status);
	/* The command dumped core already if it was going to; one is enough. */
	setrlimit(RLIMIT_CORE, &no_core);
	signal(sig, SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	_exit(128 + sig);
}

void tee_finish(pid_t child, const char *ident)
{
	int status;

	if (tee_wait(child, ident, &status) != 0) {
		fflush(NULL);
		_exit(1);
	}
	tee_leave(status);
}
