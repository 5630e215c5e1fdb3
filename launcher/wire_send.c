/* wire_send.c — the helper's side of task/wire.h: records written to the plugin's socket, the
 * lock's descriptor passed with one, and the environment's changes as E records. Must not
 * decide which records a wire-up sends (wireup.c, handover.c do). */
#include "launcher/wireup.h"
#include "task/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

extern char **environ;

int launch_wire_put(int fd, char kind, const char *value, struct dp_error *err)
{
	size_t len;
	char *rec = wire_record(kind, value, &len);

	if (!rec)
		return errprintf(err, "out of memory");
	if (launch_write_all(fd, rec, len) != 0) {
		errprintf(err, "cannot send the wire-up to the plugin: %s", strerror(errno));
		free(rec);
		return -1;
	}
	free(rec);
	return 0;
}

/* The record with a descriptor attached (SCM_RIGHTS): the plugin keeps it open in the task.
 * The wire-up's descriptor is a socket for that. */
int launch_wire_put_fd(int fd, char kind, int desc, struct dp_error *err)
{
	char rec[2] = {kind, '\0'}, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {rec, sizeof(rec)};
	struct msghdr m = {0};
	struct cmsghdr *c;
	ssize_t n;

	memset(ctl, 0, sizeof(ctl));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = ctl;
	m.msg_controllen = sizeof(ctl);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &desc, sizeof(int));
	do
		n = sendmsg(fd, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(rec))
		return errprintf(err, "cannot send the output directory's lock to the plugin: %s",
				 n < 0 ? strerror(errno) : "short write");
	return 0;
}

int launch_wire_snapshot(char ***env0, struct dp_error *err)
{
	size_t n = 0, i;
	char **e;

	while (environ[n])
		n++;
	e = calloc(n + 1, sizeof(*e));
	if (!e)
		return errprintf(err, "out of memory");
	*env0 = e;
	for (i = 0; i < n; i++)
		if (!(e[i] = strdup(environ[i])))
			return errprintf(err, "out of memory");
	return 0;
}

int launch_wire_send_env(int fd, char *const *env0, struct dp_error *err)
{
	size_t i, j;

	for (i = 0; environ[i]; i++) {
		for (j = 0; env0[j] && strcmp(env0[j], environ[i]) != 0; j++)
			;
		if (!env0[j] && launch_wire_put(fd, WIRE_ENV, environ[i], err) != 0)
			return -1;
	}
	return 0;
}

void launch_wire_snapshot_free(char **env0)
{
	for (size_t i = 0; env0 && env0[i]; i++)
		free(env0[i]);
	free(env0);
}
