/* ranks.c — forked ranks for the C unit tests (see ranks.h): fork, pipes, a deadline, kill.
 * Each call owns the processes it forks and leaves none behind; it knows nothing about them. */
#include "t/lib/ranks.h"
#include "t/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double ranks_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ranks_sleep(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

int ranks_hold_port(int *fd)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	int one = 1;
	*fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*fd < 0 || setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(*fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(*fd, (struct sockaddr *)&a, &l) < 0)
		bail_out("cannot find a free port");
	return ntohs(a.sin_port);
}

/* In the child: run fn, send its message, exit. Never returns. */
__attribute__((noreturn)) static void rank_main(const struct ranks_job *j, ranks_fn fn, int rank,
						int wfd)
{
	char msg[RANKS_MSG] = "";
	int rv = fn(j, rank, msg, sizeof(msg));
	if (write(wfd, msg, strlen(msg)) < 0)
		rv = -1;
	_exit(rv < 0 ? 1 : 0);
}

void ranks_run(struct ranks_job *j, ranks_fn fn, int nowait, double deadline_s,
	       struct ranks_out *out)
{
	pid_t pid[RANKS_MAX];
	int fd[RANKS_MAX], done[RANKS_MAX] = {0};
	size_t got[RANKS_MAX] = {0};
	if (j->world < 1 || j->world > RANKS_MAX)
		bail_out("ranks_run: %d ranks, want 1 to %d", j->world, RANKS_MAX);
	int held;
	j->port = ranks_hold_port(&held);
	fflush(stdout);
	fflush(stderr);
	for (int r = 0; r < j->world; r++) {
		int p[2];
		if (pipe(p) < 0)
			bail_out("pipe");
		out[r].status = -1;
		out[r].msg[0] = 0;
		pid[r] = fork();
		if (pid[r] < 0)
			bail_out("fork");
		if (pid[r] == 0) {
			close(held);
			close(p[0]);
			for (int k = 0; k < r; k++)
				close(fd[k]);
			rank_main(j, fn, r, p[1]);
		}
		close(p[1]);
		fcntl(p[0], F_SETFL, O_NONBLOCK);
		fd[r] = p[0];
	}
	double deadline = ranks_now() + deadline_s;
	for (;;) {
		int waiting = 0;
		for (int r = 0; r < j->world; r++) {
			if (!done[r]) {
				int st;
				if (waitpid(pid[r], &st, WNOHANG) == pid[r]) {
					done[r] = 1;
					out[r].status =
					    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
				}
			}
			if (fd[r] >= 0) {
				ssize_t n =
				    read(fd[r], out[r].msg + got[r], RANKS_MSG - 1 - got[r]);
				if (n > 0)
					got[r] += (size_t)n;
				else if (n == 0 || got[r] >= RANKS_MSG - 1 ||
					 (errno != EAGAIN && errno != EINTR)) {
					close(fd[r]);
					fd[r] = -1;
				}
				out[r].msg[got[r]] = 0;
			}
			if (r != nowait && (!done[r] || fd[r] >= 0))
				waiting = 1;
		}
		if (!waiting || ranks_now() >= deadline)
			break;
		struct pollfd p[RANKS_MAX];
		int np = 0;
		for (int r = 0; r < j->world; r++)
			if (fd[r] >= 0)
				p[np++] = (struct pollfd){.fd = fd[r], .events = POLLIN};
		poll(p, (nfds_t)np, 20);
	}
	for (int r = 0; r < j->world; r++) {
		if (fd[r] >= 0)
			close(fd[r]);
		if (!done[r]) {
			kill(pid[r], SIGKILL);
			kill(pid[r], SIGCONT);
			waitpid(pid[r], NULL, 0);
		}
	}
	close(held);
}

int ranks_msg(char *msg, size_t len, const struct dp_error *err)
{
	snprintf(msg, len, "%s", err->text);
	return -1;
}
