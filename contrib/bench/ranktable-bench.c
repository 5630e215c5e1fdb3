/* ranktable-bench.c — time building, atomically writing, reading and validating a 4096-rank
 * table (512 nodes x 8 GPUs), the launcher's per-step rank-table cost at scale. Prints the
 * median and minimum of ROUNDS runs of each phase. Built by `make bench`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "ranktable/ranktable.h"

#define ROUNDS 21

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int world = argc > 1 ? atoi(argv[1]) : 4096, per_node = 8;
	const char *path = argc > 2 ? argv[2] : "/tmp/dptrain-ranktable-bench.json";
	struct dp_error err;
	struct rt_alloc_rank *r = calloc((size_t)world, sizeof(*r));
	char(*hosts)[32] = calloc((size_t)world, 32), (*addrs)[32] = calloc((size_t)world, 32);
	double t[4][ROUNDS];
	if (!r || !hosts || !addrs || world < 1)
		return 1;
	for (int i = 0; i < world; i++) {
		int node = i / per_node;
		snprintf(hosts[i], 32, "gpu%04d", node);
		snprintf(addrs[i], 32, "10.%d.%d.%d", node >> 16 & 255, node >> 8 & 255,
			 node & 255);
		r[i] = (struct rt_alloc_rank){hosts[i],	    addrs[i],	  node,
					      i % per_node, i % per_node, NULL};
	}
	struct rt_alloc a = {.world_size = world,
			     .master_addr = addrs[0],
			     .master_port = 29500,
			     .job_id = "4242",
			     .step_id = "0",
			     .ranks = r};
	for (int k = 0; k < ROUNDS; k++) {
		struct ranktable rt, back;
		double t0 = now();
		if (rt_build(&rt, &a, &err) < 0)
			goto fail;
		double t1 = now();
		if (rt_write_atomic(&rt, path, RT_SCHEMA_DPTRAIN, 0644, &err) < 0)
			goto fail;
		double t2 = now();
		if (rt_read(&back, path, &err) < 0) /* parses and validates */
			goto fail;
		double t3 = now();
		t[0][k] = t1 - t0;
		t[1][k] = t2 - t1;
		t[2][k] = t3 - t2;
		t[3][k] = t3 - t0;
		rt_free(&rt);
		rt_free(&back);
	}
	unlink(path);
	const char *names[4] = {"build", "write (atomic, fsync)", "read + validate", "total"};
	printf("| phase (%d ranks, %d nodes) | median ms | min ms |\n|---|---|---|\n", world,
	       (world + per_node - 1) / per_node);
	for (int p = 0; p < 4; p++) {
		qsort(t[p], ROUNDS, sizeof(double), cmp);
		printf("| %s | %.2f | %.2f |\n", names[p], t[p][ROUNDS / 2] * 1e3, t[p][0] * 1e3);
	}
	return 0;
fail:
	fprintf(stderr, "ranktable-bench: %s\n", err.text);
	return 1;
}
