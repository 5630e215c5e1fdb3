/* nodeaddr.c — a Slurm node's address when its name does not resolve: what Slurm itself uses
 * to reach the node, its NodeAddr, from SLURM_NODE_ALIASES (set for cloud and dynamic nodes)
 * or from `scontrol -o show node NAME`, run with a deadline. Reads the environment and runs
 * scontrol; writes nothing. */
#define _GNU_SOURCE /* pipe2 */
#include "common/clock.h"
#include "common/error.h"
#include "common/env.h"
#include "launcher/alloc_source.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OUT_MAX (64 << 10) /* scontrol's answer for one node is a few hundred bytes */

/* SLURM_NODE_ALIASES: "name:addr:hostname,..." (addr may be "[v6]"). 0 when node is listed. */
static int from_aliases(const char *node, char *out, size_t len)
{
	const char *s = getenv(ENV_SLURM_NODE_ALIASES), *p, *e;
	size_t n = strlen(node);

	if (!s || !*s || strcmp(s, "(null)") == 0)
		return -1;
	for (p = s; *p; p = *e ? e + 1 : e) {
		const char *a, *z;

		e = p + strcspn(p, ",");
		if ((size_t)(e - p) <= n + 1 || strncmp(p, node, n) != 0 || p[n] != ':')
			continue;
		a = p + n + 1;
		if (*a == '[') {
			a++;
			z = memchr(a, ']', (size_t)(e - a));
		} else {
			z = memchr(a, ':', (size_t)(e - a));
		}
		if (!z || z == a || (size_t)(z - a) >= len)
			return -1;
		memcpy(out, a, (size_t)(z - a));
		out[z - a] = '\0';
		return 0;
	}
	return -1;
}

/* Run scontrol -o show node NODE for at most timeout_s; its output (stdout and stderr) in a
 * malloc'd string. -1 with err when it cannot run, fails or takes too long. */
static char *scontrol_node(const char *node, int timeout_s, struct dp_error *err)
{
	int p[2], status, n, fd;
	char *out = NULL;
	size_t used = 0;
	double end = now_s() + timeout_s;
	pid_t pid;

	/* before the fork: a child whose output cannot be read must not be waited for */
	out = malloc(OUT_MAX + 1);
	if (!out) {
		errprintf(err, "out of memory");
		return NULL;
	}
	if (pipe2(p, O_CLOEXEC) != 0) {
		errprintf(err, "pipe: %s", strerror(errno));
		free(out);
		return NULL;
	}
	pid = fork();
	if (pid < 0) {
		errprintf(err, "fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		free(out);
		return NULL;
	}
	if (pid == 0) {
		sigset_t none;
		char *argv[] = {"scontrol", "-o", "show", "node", (char *)node, NULL};

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		fd = open("/dev/null", O_RDONLY);
		if (fd < 0 || dup2(fd, 0) < 0 || dup2(p[1], 1) < 0 || dup2(p[1], 2) < 0)
			_exit(126);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	while (out) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		double left = end - now_s();

		if (left <= 0) {
			kill(pid, SIGKILL);
			errprintf(err, "scontrol show node %s took more than %d s", node,
				  timeout_s);
			free(out);
			out = NULL;
			break;
		}
		n = poll(&pf, 1, (int)(left * 1000) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			continue;
		n = (int)read(p[0], out + used, OUT_MAX - used);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || (used += (size_t)n) >= OUT_MAX)
			break;
	}
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!out)
		return NULL;
	out[used] = '\0';
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		out[strcspn(out, "\n")] = '\0';
		if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
			errprintf(err, "scontrol is not on PATH");
		else
			errprintf(err, "scontrol show node %s failed: %.200s", node,
				  out[0] ? out : "no output");
		free(out);
		return NULL;
	}
	return out;
}

int alloc_node_addr(const char *node, char addr[RT_ADDR_MAX], int timeout_s, struct dp_error *err)
{
	char nodeaddr[RT_HOST_MAX], *out, *p;
	size_t n;

	if (from_aliases(node, nodeaddr, sizeof(nodeaddr)) != 0) {
		out = scontrol_node(node, timeout_s, err);
		if (!out)
			return -1;
		p = strstr(out, " NodeAddr=");
		n = p ? strcspn(p + 10, " \n") : 0;
		if (!n || n >= sizeof(nodeaddr)) {
			errprintf(err, "scontrol show node %s gives no NodeAddr", node);
			free(out);
			return -1;
		}
		memcpy(nodeaddr, p + 10, n);
		nodeaddr[n] = '\0';
		free(out);
	}
	/* NodeAddr is an address, or a name that must resolve where Slurm runs */
	if (rt_resolve_host(nodeaddr, addr, err) != 0) {
		errprefix(err, "its NodeAddr %s", nodeaddr);
		return -1;
	}
	return 0;
}
