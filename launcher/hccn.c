/* hccn.c — a node's NPU addresses from hccn.conf ("address_N=IP" per device N, as Ascend's
 * hccn_tool writes it and MindSpore's hccl_tools.py reads it): HCCL's device_ip of a rank. */
#include "common/error.h"
#include "common/openfile.h"
#include "launcher/alloc.h"
#include "ranktable/ranktable.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HCCN_DEFAULT "/etc/hccn.conf"

static int is_address(const char *s)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return strlen(s) < RT_ADDR_MAX &&
	       (inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1);
}

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

int alloc_hccn_lookup(const char *path, int device, char out[RT_ADDR_MAX], struct dp_error *err)
{
	const char *file = path && *path ? path : HCCN_DEFAULT;
	char line[512], *key, *val, *eq, *end;
	int lineno = 0, found = 0;
	FILE *f;

	struct dp_error oerr;
	int fd;

	out[0] = '\0';
	/* The same rule as the output directory's: the user's own file or the site's (root's),
	 * that nobody else can write, opened without blocking (a FIFO would hang the wire-up):
	 * another user's file must not choose this job's device addresses. */
	fd = dp_open_regular(file, O_RDONLY, 0, DP_OPEN_MINE_OR_ROOT | DP_OPEN_NOT_SHARED, NULL,
			     &oerr);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT && !(path && *path))
			return 0; /* not an NPU node: HCCL's device_ip is the host address */
		if (e == EINVAL)  /* a check failed: its message says which */
			errprintf(err, "%s (mindspore.hccn_conf names it)", oerr.text);
		else
			errprintf(err, "%s: cannot read it: %s (mindspore.hccn_conf names it)",
				  file, strerror(e));
		return -1;
	}
	f = fdopen(fd, "r");
	if (!f) {
		errprintf(err, "%s: cannot read it: %s (mindspore.hccn_conf names it)", file,
			  strerror(errno));
		close(fd);
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		long n;
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			errprintf(err, "%s:%d: line longer than %zu characters", file, lineno,
				  sizeof(line) - 2);
			goto bad;
		}
		key = trim(line);
		if (strncmp(key, "address_", 8) != 0)
			continue; /* netmask_N, gateway_N, comments: not ours */
		eq = strchr(key, '=');
		if (!eq) {
			errprintf(err, "%s:%d: '%s' has no '=' (expected address_N=IP)", file,
				  lineno, key);
			goto bad;
		}
		*eq = '\0';
		val = trim(eq + 1);
		errno = 0;
		n = strtol(key + 8, &end, 10);
		if (errno || end == key + 8 || *trim(end) || n < 0 || n > 1000000) {
			errprintf(err, "%s:%d: '%s' is not address_N with a device number N", file,
				  lineno, key);
			goto bad;
		}
		if (!is_address(val)) {
			errprintf(err, "%s:%d: address_%ld='%s' is not an IPv4 or IPv6 address",
				  file, lineno, n, val);
			goto bad;
		}
		if (n == device) {
			snprintf(out, RT_ADDR_MAX, "%s", val);
			found = 1;
		}
	}
	if (ferror(f)) {
		errprintf(err, "%s: read error", file);
		goto bad;
	}
	fclose(f);
	if (!found) {
		errprintf(err,
			  "%s has no address_%d, this rank's device: HCCL needs it as device_ip "
			  "(add it, or name the right file in mindspore.hccn_conf)",
			  file, device);
		return -1;
	}
	return 1;
bad:
	fclose(f);
	return -1;
}
