/* port.c — master ports: parsing a user's MASTER_PORT and picking a free one on rank 0's
 * node. The port derived from job and step id (no PMIx) is ranktable's rt_default_port, so
 * dptrain-ranktable from-env and the launcher agree. Binds only to probe or hold, never
 * listens. */
#include "common/error.h"
#include "launcher/alloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int alloc_port_parse(const char *s, const char *what, int *port, struct dp_error *err)
{
	char *end;
	long v;

	if (!s || *s < '0' || *s > '9') {
		errprintf(err, "%s='%s' is not a port number (1-65535)", what, s ? s : "");
		return -1;
	}
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end != '\0' || v < 1 || v > 65535) {
		errprintf(err, "%s='%s' is not a port number (1-65535)", what, s);
		return -1;
	}
	*port = (int)v;
	return 0;
}

int alloc_port_pick(const char *addr, int *port, struct dp_error *err)
{
	int fd;
	if (alloc_port_hold(addr, port, &fd, err) != 0)
		return -1;
	close(fd);
	return 0;
}

int alloc_port_hold(const char *addr, int *port, int *held, struct dp_error *err)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd = -1, rv = -1, one = 1;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, addr, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
		ss.ss_family = AF_INET;
		len = sizeof(struct sockaddr_in);
	} else if (inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
		ss.ss_family = AF_INET6;
		len = sizeof(struct sockaddr_in6);
	} else {
		errprintf(err, "cannot pick a master port: '%s' is not an IP address", addr);
		return -1;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
		errprintf(err, "cannot pick a master port: socket: %s", strerror(errno));
		goto out;
	}
	/* Port 0: the kernel picks one no socket uses. */
	if (bind(fd, (struct sockaddr *)&ss, len) != 0) {
		errprintf(err, "cannot pick a master port on %s: bind: %s", addr, strerror(errno));
		goto out;
	}
	len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
		errprintf(err, "cannot pick a master port on %s: getsockname: %s", addr,
			  strerror(errno));
		goto out;
	}
	*port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					      : ((struct sockaddr_in6 *)&ss)->sin6_port);
	*held = fd;
	fd = -1;
	rv = 0;
out:
	if (fd >= 0)
		close(fd);
	return rv;
}
