/* netaddr.c — this rank's interface address and node name. Reads interfaces (getifaddrs)
 * and the environment; never resolves peers (ranktable's rt_resolve_host does that) and never
 * binds anything. */
#include "common/error.h"
#include "common/env.h"
#include "launcher/alloc.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int sa_text(const struct sockaddr *sa, char addr[RT_ADDR_MAX])
{
	const void *src;

	if (sa->sa_family == AF_INET)
		src = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
	else
		src = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
	return inet_ntop(sa->sa_family, src, addr, RT_ADDR_MAX) ? 0 : -1;
}

static int link_local6(const struct sockaddr *sa)
{
	const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
	return IN6_IS_ADDR_LINKLOCAL(a);
}

/* The names of all interfaces, for a message that tells the user what to pick instead. */
static void iface_names(const struct ifaddrs *list, char *buf, size_t len)
{
	const struct ifaddrs *i, *j;
	size_t used = 0;

	buf[0] = '\0';
	for (i = list; i; i = i->ifa_next) {
		for (j = list; j != i; j = j->ifa_next)
			if (strcmp(j->ifa_name, i->ifa_name) == 0)
				break;
		if (j != i)
			continue;
		if (used + strlen(i->ifa_name) + 3 >= len)
			break;
		used +=
		    (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", i->ifa_name);
	}
}

int alloc_addr_iface(const char *addr, char name[IF_NAMESIZE])
{
	struct ifaddrs *list = NULL, *i;
	char text[RT_ADDR_MAX];
	int found = 0;

	if (getifaddrs(&list) != 0)
		return -1;
	for (i = list; i && !found; i = i->ifa_next) {
		if (!i->ifa_addr ||
		    (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) ||
		    sa_text(i->ifa_addr, text) != 0 || strcmp(text, addr) != 0)
			continue;
		snprintf(name, IF_NAMESIZE, "%s", i->ifa_name);
		found = 1;
	}
	freeifaddrs(list);
	return found;
}

int alloc_iface_addr(const char *iface, char addr[RT_ADDR_MAX], struct dp_error *err)
{
	struct ifaddrs *list = NULL, *i, *v6 = NULL;
	char names[256];
	int found = 0, rv = -1;

	err->text[0] = '\0';
	if (getifaddrs(&list) != 0) {
		errprintf(err, "cannot list network interfaces (getifaddrs): %m");
		return -1;
	}
	for (i = list; i; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (iface && *iface) {
			if (strcmp(i->ifa_name, iface) != 0)
				continue;
			found = 1;
			if (i->ifa_addr->sa_family == AF_INET) {
				rv = sa_text(i->ifa_addr, addr);
				goto out;
			}
			if (i->ifa_addr->sa_family == AF_INET6 && !v6 && !link_local6(i->ifa_addr))
				v6 = i;
			continue;
		}
		if (i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) ||
		    !(i->ifa_flags & IFF_UP))
			continue;
		rv = sa_text(i->ifa_addr, addr);
		goto out;
	}
	if (iface && *iface) {
		if (v6) {
			rv = sa_text(v6->ifa_addr, addr);
			goto out;
		}
		iface_names(list, names, sizeof(names));
		if (found)
			errprintf(err, "interface '%s' has no usable address (interfaces: %s)",
				  iface, names);
		else
			errprintf(
			    err,
			    "no interface '%s' on this node (interfaces: %s); set DPTRAIN_IFACE "
			    "or the config's network.interface to one of them",
			    iface, names);
		goto out;
	}
	/* A single machine without a network still runs: ranks meet on loopback. */
	snprintf(addr, RT_ADDR_MAX, "127.0.0.1");
	rv = 0;
out:
	if (rv != 0 && err->text[0] == '\0')
		errprintf(err, "cannot format the address of interface '%s'", iface ? iface : "?");
	freeifaddrs(list);
	return rv;
}

void alloc_hostname(char host[RT_HOST_MAX])
{
	const char *s = getenv(ENV_SLURMD_NODENAME);

	if (s && *s && strlen(s) < RT_HOST_MAX) {
		snprintf(host, RT_HOST_MAX, "%s", s);
		return;
	}
	if (gethostname(host, RT_HOST_MAX) != 0 || host[0] == '\0')
		snprintf(host, RT_HOST_MAX, "localhost");
	host[RT_HOST_MAX - 1] = '\0';
}
