/* alloc_common.c — what the allocation sources (alloc_pmix.c, alloc_env.c, alloc_store.c)
 * share: this rank's GPU, the test hook that stalls a rank, the record the ranks exchange,
 * and rank lists for messages. Depends on no source and on no dispatcher (alloc.c), so the
 * sources and alloc.c depend on it and never on each other in a circle. */
#define _GNU_SOURCE
#include "common/error.h"
#include "common/env.h"
#include "launcher/alloc_source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int alloc_self_gpu(const struct alloc_opts *o, enum alloc_source src, int local_rank,
		   struct alloc_gpu *g, struct dp_error *err)
{
	const char *cvd = getenv(ENV_CUDA_VISIBLE_DEVICES);
	char all[ALLOC_GPU_MAX * 6];
	size_t used = 0;
	int n, i;

	if (!cvd && src == ALLOC_SRC_ENV) {
		n = alloc_gpu_count_devices(o->dev_dir);
		all[0] = '\0';
		for (i = 0; i < n && i < ALLOC_GPU_MAX; i++)
			used += (size_t)snprintf(all + used, sizeof(all) - used, "%s%d",
						 i ? "," : "", i);
		cvd = all;
	}
	if (!cvd)
		cvd = "";
	return alloc_gpu_select(cvd, local_rank, g, err);
}

int alloc_self_device_ip(const struct alloc_opts *o, struct alloc_rank *x, struct dp_error *err)
{
	char path[4096];
	const char *n = o->hccn_conf ? strstr(o->hccn_conf, "%n") : NULL;
	int device = x->local_rank;

	if (x->gpu.index >= 0 && x->gpu.id[0] >= '0' && x->gpu.id[0] <= '9')
		device = atoi(x->gpu.id);
	/* %n: the node's name, for a file per node on a shared file system */
	if (n && snprintf(path, sizeof(path), "%.*s%s%s", (int)(n - o->hccn_conf), o->hccn_conf,
			  x->host, n + 2) >= (int)sizeof(path)) {
		errprintf(err, "mindspore.hccn_conf is too long");
		return -1;
	}
	return alloc_hccn_lookup(n ? path : o->hccn_conf, device, x->device_ip, err) < 0 ? -1 : 0;
}

void alloc_stall(const struct alloc_opts *o, int rank, const char *where)
{
	struct timespec ts;

	if (o->stall_rank < 0 || rank != o->stall_rank)
		return;
	fprintf(stderr,
		"dptrain-launch: rank %d: test hook DPTRAIN_TEST_STALL_RANK: sleeping %d s %s\n",
		rank, o->stall_s, where);
	ts.tv_sec = o->stall_s;
	ts.tv_nsec = 0;
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void alloc_record_format(char *buf, size_t len, const struct alloc_rank *x, int nodeid, int port)
{
	snprintf(buf, len, "2 %s %s %d %d %d %d %s %s %d", x->host, x->addr, nodeid, x->local_rank,
		 x->gpu.index, x->gpu.count, x->gpu.id[0] ? x->gpu.id : "-",
		 x->device_ip[0] ? x->device_ip : "-", port);
}

int alloc_record_parse(const char *rec, struct alloc_rank *x, int *nodeid, int *port)
{
	char host[RT_HOST_MAX], addr[RT_ADDR_MAX], gid[ALLOC_GPU_ID_MAX], dip[RT_ADDR_MAX];
	int version, n;

	if (sscanf(rec, "%d %255s %63s %d %d %d %d %95s %63s %d%n", &version, host, addr, nodeid,
		   &x->local_rank, &x->gpu.index, &x->gpu.count, gid, dip, port, &n) != 10 ||
	    version != 2 || rec[n] != '\0')
		return -1;
	snprintf(x->device_ip, sizeof(x->device_ip), "%s", strcmp(dip, "-") == 0 ? "" : dip);
	snprintf(x->host, sizeof(x->host), "%s", host);
	snprintf(x->addr, sizeof(x->addr), "%s", addr);
	snprintf(x->gpu.id, sizeof(x->gpu.id), "%s", strcmp(gid, "-") == 0 ? "" : gid);
	return 0;
}

void alloc_format_ranks(const int *ranks, int n, char *buf, size_t len)
{
	size_t used = 0;
	int i = 0, j, shown = 0;

	buf[0] = '\0';
	while (i < n) {
		for (j = i; j + 1 < n && ranks[j + 1] == ranks[j] + 1; j++)
			;
		if (used + 48 >= len) {
			snprintf(buf + used, len - used, "%s... and %d more", shown ? ", " : "",
				 n - i);
			return;
		}
		if (j == i)
			used += (size_t)snprintf(buf + used, len - used, "%s%d", shown ? ", " : "",
						 ranks[i]);
		else
			used += (size_t)snprintf(buf + used, len - used, "%s%d-%d",
						 shown ? ", " : "", ranks[i], ranks[j]);
		shown++;
		i = j + 1;
	}
}

/* qsort_r comparators over rank indices. */

int alloc_table_write(const struct ranktable *rt, const char *path, struct dp_error *err)
{

	if (rt_write_atomic(rt, path, RT_SCHEMA_DPTRAIN, 0600, err) != 0) {
		errprefix(err, "cannot write the rank table");
		return -1;
	}
	return 1;
}
