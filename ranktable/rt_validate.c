/* rt_validate.c — what makes a rank table valid, and the JSON paths its messages name.
 * Owns rt_validate and the checks every reader and writer shares; never reads or writes JSON
 * itself (rt_json.c does). */
#include "common/error.h"
#include "ranktable/rt_internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rt_is_address(const char *s)
{
	unsigned char buf[sizeof(struct in6_addr)];
	return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* RFC 1123 labels, with '_' tolerated as resolvers do. */
int rt_is_hostname(const char *s)
{
	size_t len = strlen(s), label = 0;
	if (len == 0 || len >= RT_HOST_MAX)
		return 0;
	for (; *s; s++) {
		if (*s == '.') {
			if (label == 0)
				return 0;
			label = 0;
		} else if (isalnum((unsigned char)*s) || *s == '-' || *s == '_') {
			if (++label > 63)
				return 0;
		} else {
			return 0;
		}
	}
	return 1;
}

int rt_is_token(const char *s)
{
	for (; *s; s++)
		if (*s <= 0x20 || *s >= 0x7f)
			return 0;
	return 1;
}

static const char *const rt_field_name[] = {
    [RT_F_RANK_ID] = "rank_id",
    [RT_F_DEVICE_ID] = "device_id",
    [RT_F_DEVICE_IP] = "device_ip",
    [RT_F_SERVER_ID] = "server_id",
    [RT_F_HOST] = "host",
    [RT_F_NODE_RANK] = "node_rank",
    [RT_F_LOCAL_RANK] = "local_rank",
    [RT_F_GPU] = "gpu",
};

void rt_path(char *buf, size_t size, const struct ranktable *rt, const struct rt_where *w, int rank,
	     enum rt_field f)
{
	const char *name = rt_field_name[f];
	const struct rt_loc *loc = w && w->loc ? &w->loc[rank] : NULL;

	if (f == RT_F_HOST || f == RT_F_NODE_RANK || f == RT_F_LOCAL_RANK || f == RT_F_GPU) {
		snprintf(buf, size, "dptrain.ranks[%d].%s", loc && loc->k >= 0 ? loc->k : rank,
			 name);
		return;
	}
	if (loc && w->schema == RT_SCHEMA_LEGACY) {
		snprintf(buf, size, "group_list[0].instance_list[%d]%s.%s", loc->j,
			 f == RT_F_DEVICE_ID || f == RT_F_DEVICE_IP ? ".devices[0]" : "", name);
		return;
	}
	int server = loc ? loc->i : rt->ranks[rank].node_rank, device = 0;
	if (loc) {
		device = loc->j;
	} else {
		/* As written: devices of a server in rank order. */
		for (int r = 0; r < rank; r++)
			device += rt->ranks[r].node_rank == server;
	}
	if (f == RT_F_SERVER_ID)
		snprintf(buf, size, "server_list[%d].server_id", server);
	else
		snprintf(buf, size, "server_list[%d].device[%d].%s", server, device, name);
}

int rt_check_ranks(const int *ids, int n, int *inv, void (*path)(char *, size_t, const void *, int),
		   const void *ctx, const char *list, struct dp_error *err)
{
	char p[160], q[160];
	int outside = -1; /* the first entry whose id is not in 0..n-1 */

	for (int r = 0; r < n; r++)
		inv[r] = -1;
	for (int e = 0; e < n; e++) {
		int id = ids[e];
		if (id < 0 || id >= n) {
			outside = outside < 0 ? e : outside;
			continue;
		}
		if (inv[id] >= 0) {
			path(p, sizeof(p), ctx, e);
			path(q, sizeof(q), ctx, inv[id]);
			return errprintf(err, "%s: rank %d appears twice (also at %s)", p, id, q);
		}
		inv[id] = e;
	}
	/* n entries and no duplicates: a rank is missing exactly when some id is out of range, and
	 * the missing rank is what a user who edited the table wants to hear about first. */
	if (outside < 0)
		return 0;
	int missing = 0;
	while (inv[missing] >= 0)
		missing++;
	path(p, sizeof(p), ctx, outside);
	return errprintf(err,
			 "%s%srank %d is missing (ranks must be 0..%d each exactly once; %s is %d)",
			 list, *list ? ": " : "", missing, n - 1, p, ids[outside]);
}

/* A fixed-size string field of a table built by a caller must hold a terminating NUL. */
static int rt_terminated(const char *s, size_t size)
{
	return memchr(s, '\0', size) != NULL;
}

struct rt_dev {
	int device_id, rank;
};

static int rt_dev_cmp(const void *a, const void *b)
{
	const struct rt_dev *x = a, *y = b;
	if (x->device_id != y->device_id)
		return x->device_id < y->device_id ? -1 : 1;
	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Per node checks: one host and server_id, local ranks 0..k-1 once each, devices unique. */
static int rt_check_nodes(const struct ranktable *rt, const struct rt_where *w,
			  struct dp_error *err)
{
	int n = rt->world_size, m = rt->node_count, rv = -1;
	int *first = malloc((size_t)m * sizeof(int)), *size = calloc((size_t)m, sizeof(int));
	int *start = malloc(((size_t)m + 1) * sizeof(int)), *slot = malloc((size_t)n * sizeof(int));
	int *byn = malloc((size_t)n * sizeof(int));
	struct rt_dev *dev = malloc((size_t)n * sizeof(*dev));
	char p[160], q[160];

	if (!first || !size || !start || !slot || !byn || !dev) {
		errprintf(err, "out of memory checking %d ranks", n);
		goto out;
	}
	for (int i = 0; i < m; i++)
		first[i] = -1;
	for (int r = 0; r < n; r++) {
		const struct rt_rank *x = &rt->ranks[r];
		int f = first[x->node_rank];
		size[x->node_rank]++;
		if (f < 0) {
			first[x->node_rank] = r;
			continue;
		}
		if (strcmp(x->host, rt->ranks[f].host) != 0) {
			rt_path(p, sizeof(p), rt, w, r, RT_F_HOST);
			errprintf(
			    err,
			    "%s: \"%s\" differs from \"%s\" of rank %d on the same node (node %d)",
			    p, x->host, rt->ranks[f].host, f, x->node_rank);
			goto out;
		}
		if (strcmp(x->server_id, rt->ranks[f].server_id) != 0) {
			rt_path(p, sizeof(p), rt, w, r, RT_F_SERVER_ID);
			errprintf(
			    err,
			    "%s: \"%s\" differs from \"%s\" of rank %d on the same node (node %d)",
			    p, x->server_id, rt->ranks[f].server_id, f, x->node_rank);
			goto out;
		}
	}
	for (int i = 0; i < m; i++) {
		if (first[i] < 0) {
			errprintf(
			    err,
			    "node %d has no ranks (node ranks must be 0..%d, each with a rank)", i,
			    m - 1);
			goto out;
		}
	}
	/* Group ranks by node, in rank order (a counting sort). */
	start[0] = 0;
	for (int i = 0; i < m; i++)
		start[i + 1] = start[i] + size[i];
	for (int i = 0; i < m; i++)
		size[i] = 0;
	for (int r = 0; r < n; r++) {
		int node = rt->ranks[r].node_rank;
		byn[start[node] + size[node]++] = r;
	}
	for (int i = 0; i < n; i++)
		slot[i] = -1;
	for (int i = 0; i < m; i++) {
		for (int s = start[i]; s < start[i + 1]; s++) {
			int r = byn[s], l = rt->ranks[r].local_rank;
			if (l >= size[i]) {
				rt_path(p, sizeof(p), rt, w, r, RT_F_LOCAL_RANK);
				errprintf(
				    err, "%s: local rank %d is out of range: node %d has %d rank%s",
				    p, l, i, size[i], size[i] == 1 ? "" : "s");
				goto out;
			}
			if (slot[start[i] + l] >= 0) {
				rt_path(p, sizeof(p), rt, w, r, RT_F_LOCAL_RANK);
				errprintf(
				    err,
				    "%s: local rank %d appears twice on node %d (also rank %d)", p,
				    l, i, slot[start[i] + l]);
				goto out;
			}
			slot[start[i] + l] = r;
			dev[s].device_id = rt->ranks[r].device_id;
			dev[s].rank = r;
		}
		qsort(dev + start[i], (size_t)size[i], sizeof(*dev), rt_dev_cmp);
		for (int s = start[i] + 1; s < start[i + 1]; s++) {
			if (dev[s].device_id != dev[s - 1].device_id)
				continue;
			rt_path(p, sizeof(p), rt, w, dev[s].rank, RT_F_DEVICE_ID);
			rt_path(q, sizeof(q), rt, w, dev[s - 1].rank, RT_F_DEVICE_ID);
			errprintf(err, "%s: device %d appears twice on node %s (also at %s)", p,
				  dev[s].device_id, rt->ranks[dev[s].rank].host, q);
			goto out;
		}
	}
	rv = 0;
out:
	free(first);
	free(size);
	free(start);
	free(slot);
	free(byn);
	free(dev);
	return rv;
}

int rt_check(const struct ranktable *rt, const struct rt_where *w, struct dp_error *err)
{
	int n = rt->world_size;
	char p[160];

	if (n < 1 || n > RT_WORLD_MAX)
		return errprintf(err, "dptrain.world_size: %d is out of range (1..%d)", n,
				 RT_WORLD_MAX);
	if (!rt->ranks)
		return errprintf(err, "the table has no ranks");
	if (rt->node_count < 1 || rt->node_count > n)
		return errprintf(err, "server_count: %d nodes for %d ranks (expected 1..%d)",
				 rt->node_count, n, n);
	if (!rt_terminated(rt->master_addr, sizeof(rt->master_addr)) ||
	    (rt->master_addr[0] && !rt_is_address(rt->master_addr) &&
	     !rt_is_hostname(rt->master_addr)))
		return errprintf(
		    err,
		    "dptrain.master_addr: \"%.64s\" is not an IPv4 or IPv6 address or a host name",
		    rt->master_addr);
	if (rt->master_port < 0 || rt->master_port > 65535)
		return errprintf(err, "dptrain.master_port: %d is out of range (1..65535)",
				 rt->master_port);
	if (!rt_terminated(rt->job_id, sizeof(rt->job_id)) || !rt_is_token(rt->job_id))
		return errprintf(err,
				 "dptrain.job_id: \"%.*s\" is not printable text without spaces",
				 (int)sizeof(rt->job_id) - 1, rt->job_id);
	if (!rt_terminated(rt->step_id, sizeof(rt->step_id)) || !rt_is_token(rt->step_id))
		return errprintf(err,
				 "dptrain.step_id: \"%.*s\" is not printable text without spaces",
				 (int)sizeof(rt->step_id) - 1, rt->step_id);

	for (int r = 0; r < n; r++) {
		const struct rt_rank *x = &rt->ranks[r];
		if (x->node_rank < 0 || x->node_rank >= rt->node_count) {
			rt_path(p, sizeof(p), rt, w, r, RT_F_NODE_RANK);
			return errprintf(err, "%s: node rank %d is out of range (0..%d)", p,
					 x->node_rank, rt->node_count - 1);
		}
		if (!rt_terminated(x->host, sizeof(x->host)) || !x->host[0] ||
		    !rt_is_token(x->host)) {
			rt_path(p, sizeof(p), rt, w, r, RT_F_HOST);
			return errprintf(err,
					 "%s: \"%.*s\" is not a host name (printable, no spaces)",
					 p, (int)sizeof(x->host) - 1, x->host);
		}
		if (!rt_terminated(x->server_id, sizeof(x->server_id)) ||
		    !rt_is_address(x->server_id)) {
			rt_path(p, sizeof(p), rt, w, r, RT_F_SERVER_ID);
			return errprintf(err, "%s: \"%.*s\" is not an IPv4 or IPv6 address", p,
					 (int)sizeof(x->server_id) - 1, x->server_id);
		}
		if (!rt_terminated(x->addr, sizeof(x->addr)) || !rt_is_address(x->addr)) {
			rt_path(p, sizeof(p), rt, w, r, RT_F_DEVICE_IP);
			return errprintf(err, "%s: \"%.*s\" is not an IPv4 or IPv6 address", p,
					 (int)sizeof(x->addr) - 1, x->addr);
		}
		if (x->device_id < 0) {
			rt_path(p, sizeof(p), rt, w, r, RT_F_DEVICE_ID);
			return errprintf(err, "%s: device %d is negative", p, x->device_id);
		}
		if (x->local_rank < 0) {
			rt_path(p, sizeof(p), rt, w, r, RT_F_LOCAL_RANK);
			return errprintf(err, "%s: local rank %d is negative", p, x->local_rank);
		}
		if (x->gpu < -1) {
			rt_path(p, sizeof(p), rt, w, r, RT_F_GPU);
			return errprintf(err, "%s: %d is not a GPU index (-1 for none)", p, x->gpu);
		}
	}
	return rt_check_nodes(rt, w, err);
}

int rt_validate(const struct ranktable *rt, struct dp_error *err)
{
	return rt_check(rt, NULL, err);
}
