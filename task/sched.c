/* sched.c — MindSpore's scheduler process (sched.h). */
#define _GNU_SOURCE
#include "task/sched.h"
#include "common/env.h"
#include "common/openfile.h"
#include "common/path_search.h"
#include "task/tee.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *env_get(char *const envp[], const char *name)
{
	size_t n = strlen(name);

	for (; envp && *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

/* envp with MS_ROLE=MS_SCHED, RANK_ID=0 and without MS_NODE_ID; NULL when out of memory. */
static char **sched_env(char *const envp[])
{
	size_t n = 0, k = 0;
	char **e;

	while (envp && envp[n])
		n++;
	e = calloc(n + 3, sizeof(*e));
	if (!e)
		return NULL;
	static char role[64], rank[64];
	snprintf(role, sizeof(role), "%s=MS_SCHED", ENV_MS_ROLE);
	snprintf(rank, sizeof(rank), "%s=0", ENV_RANK_ID);
	for (size_t i = 0; i < n; i++)
		if (!dp_env_is(envp[i], ENV_MS_ROLE) && !dp_env_is(envp[i], ENV_RANK_ID) &&
		    !dp_env_is(envp[i], ENV_MS_NODE_ID))
			e[k++] = envp[i];
	e[k++] = role;
	e[k++] = rank;
	e[k] = NULL;
	return e;
}

pid_t sched_start(char *const argv[], char *const envp[], const char *log, const char *ident)
{
	char path[PATH_MAX], **env;
	pid_t pid, parent = getpid();
	int fd, in;

	if (path_search(argv[0], env_get(envp, "PATH"), path, sizeof(path)) != 0) {
		fprintf(stderr, "dptrain: %s: cannot start the MindSpore scheduler: '%s': %s\n",
			ident, argv[0], strerror(errno));
		return -1;
	}
	struct dp_error err;
	fd = dp_open_regular(log, O_WRONLY | O_CREAT | O_APPEND, 0644, DP_OPEN_MINE,
			     "the MindSpore scheduler's log", &err);
	if (fd < 0) {
		fprintf(stderr, "dptrain: %s: %s\n", ident, err.text);
		return -1;
	}
	env = sched_env(envp);
	if (!env) {
		fprintf(stderr, "dptrain: %s: out of memory\n", ident);
		close(fd);
		return -1;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		sigset_t none;
		/* ends with whoever started it (dptrain-launch, the plugin's task) */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
			_exit(1);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		in = open("/dev/null", O_RDONLY);
		if (in < 0 || dup2(in, STDIN_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0 ||
		    dup2(fd, STDERR_FILENO) < 0)
			_exit(126);
		execve(path, argv, env);
		dprintf(STDERR_FILENO, "dptrain: %s: cannot run the scheduler '%s': %s\n", ident,
			path, strerror(errno));
		_exit(127);
	}
	free(env);
	close(fd);
	if (pid < 0)
		fprintf(stderr, "dptrain: %s: fork: %s\n", ident, strerror(errno));
	return pid;
}

void sched_finish(pid_t pid, int ok, const char *log, const char *ident)
{
	int status = 0, reaped;

	if (pid <= 0)
		return;
	reaped = tee_reap_within(pid, &status, ok ? SCHED_GRACE_S : 0);
	if (!reaped) {
		kill(pid, SIGTERM);
		reaped = tee_reap_within(pid, &status, SCHED_KILL_S);
	}
	if (!reaped) {
		kill(pid, SIGKILL);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		return;
	}
	if (ok && WIFEXITED(status) && WEXITSTATUS(status) != 0)
		fprintf(stderr,
			"dptrain: %s: the MindSpore scheduler exited with status %d (its output: "
			"%s)\n",
			ident, WEXITSTATUS(status), log);
}
