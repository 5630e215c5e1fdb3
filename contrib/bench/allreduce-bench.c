/* allreduce-bench.c — allreduce bandwidth of the CPU collective engine (trainer/dist/comm_cpu.c,
 * comm_shm.c): W forked ranks on 127.0.0.1 allreduce float32 buffers of several sizes; rank 0
 * prints the median time and the algorithm bandwidth (size / time, as PyTorch reports it) per
 * size. allreduce-gloo.py measures torch.distributed's gloo the same way; allreduce-bench.sh
 * runs both. Touches nothing but stdout.
 *
 *   allreduce-bench [-w WORLD] [-i ITERS] [-c CHUNK_BYTES] [-t] [-n NODES] [-s] [SIZE_MB...]
 *   allreduce-bench -m [-w WORLD] [-i ITERS] [SIZE_MB...]
 *   allreduce-bench -e [-i ITERS] [SIZE_MB...]
 *   (default: 2 ranks, 20 iterations, 1 11.2 44.8 102 MB; MB = 10^6 bytes)
 * -t: the TCP ring only (as DPTRAIN_COMM_SHM=0); -n: rank r on node "n<r % NODES>" (shared
 * memory in each, the TCP ring between them, all on this host); -s: the buffers in the comm's
 * shared buffer (shared_alloc, where DDP keeps its gradients; reduced in place), where it has
 * one (a node of several ranks), else as without -s; -m: memcpy of each size in
 * this one process instead (the machine's copy bandwidth), or with -w in WORLD processes at
 * once, each iteration as slow as the slowest (the floor of a WORLD-rank allreduce: each rank
 * reads its input and writes its output once, all at once); -e: one rank of a job started by srun
 * --dptrain or dptrain-run (the store from MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
 * DPTRAIN_STORE_SECRET). Output, one line per size: "size_mb median_ms GB/s" (and the engine's name
 * on stderr). */
#define _GNU_SOURCE
#include "trainer/dist/comm.h"
#include "common/env.h"
#include "store/store.h"

#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &l) < 0) {
		perror("allreduce-bench: free port");
		exit(1);
	}
	close(fd);
	return ntohs(a.sin_port);
}

struct bench_opts {
	size_t chunk;
	int tcp_only, nodes, from_env, shared;
};

/* memcpy of each size, from a buffer to another (both touched first): median GB/s = size /
 * time, in this process alone. */
static int memcpy_main(int iters, int nsizes, const double *mb)
{
	double *t = calloc((size_t)iters, sizeof(*t));
	for (int k = 0; k < nsizes; k++) {
		size_t bytes = (size_t)(mb[k] * 1e6);
		unsigned char *a = malloc(bytes), *b = malloc(bytes);
		if (!t || !a || !b) {
			fprintf(stderr, "allreduce-bench: out of memory\n");
			return 1;
		}
		memset(a, 1, bytes);
		memset(b, 2, bytes);
		for (int it = -2; it < iters; it++) {
			double t0 = now_s();
			memcpy(b, a, bytes);
			if (it >= 0)
				t[it] = now_s() - t0;
			a[(size_t)it % bytes] ^= b[bytes / 2]; /* the copy is used */
		}
		qsort(t, (size_t)iters, sizeof(*t), cmp_double);
		double med = t[iters / 2];
		printf("%g %.3f %.3f\n", mb[k], med * 1e3, mb[k] * 1e6 / med / 1e9);
		fflush(stdout);
		free(a);
		free(b);
	}
	free(t);
	return 0;
}

/* -m -w W: W processes copying at once, each its own buffers of each size, every iteration
 * started together (a barrier in shared memory, outside the timing); the time of an
 * iteration is its slowest copy's. Each rank of an allreduce must read its input and write its
 * output at least once, all ranks at once: this is the floor the memory system sets. */
struct par_shared {
	_Atomic int arrived, gen;
	double t[]; /* [iteration][rank] */
};

static void par_barrier(struct par_shared *sh, int world)
{
	int g = atomic_load(&sh->gen);
	if (atomic_fetch_add(&sh->arrived, 1) == world - 1) {
		atomic_store(&sh->arrived, 0);
		atomic_fetch_add(&sh->gen, 1);
		return;
	}
	while (atomic_load(&sh->gen) == g)
		sched_yield();
}

static int memcpy_par_main(int world, int iters, int nsizes, const double *mb)
{
	size_t shbytes = sizeof(struct par_shared) + (size_t)iters * world * sizeof(double);
	struct par_shared *sh =
	    mmap(NULL, shbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	double *t = calloc((size_t)iters, sizeof(*t));
	pid_t pid[64];

	if (sh == MAP_FAILED || !t) {
		fprintf(stderr, "allreduce-bench: out of memory\n");
		return 1;
	}
	for (int k = 0; k < nsizes; k++) {
		size_t bytes = (size_t)(mb[k] * 1e6);
		atomic_store(&sh->arrived, 0);
		for (int r = 1; r < world; r++)
			if ((pid[r] = fork()) == 0)
				break;
			else if (pid[r] < 0) {
				perror("allreduce-bench: fork");
				return 1;
			}
		int rank = 0;
		for (int r = 1; r < world; r++)
			if (pid[r] == 0) {
				rank = r;
				break;
			}
		unsigned char *a = malloc(bytes), *b = malloc(bytes);
		if (!a || !b) {
			fprintf(stderr, "allreduce-bench: out of memory\n");
			_exit(1);
		}
		memset(a, 1, bytes);
		memset(b, 2, bytes);
		for (int it = -2; it < iters; it++) {
			par_barrier(sh, world);
			double t0 = now_s();
			memcpy(b, a, bytes);
			if (it >= 0)
				sh->t[(size_t)it * world + rank] = now_s() - t0;
			a[(size_t)it % bytes] ^= b[bytes / 2];
		}
		free(a);
		free(b);
		if (rank != 0)
			_exit(0);
		int bad = 0;
		for (int r = 1; r < world; r++) {
			int st;
			if (waitpid(pid[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
				bad = 1;
		}
		if (bad) {
			fprintf(stderr, "allreduce-bench: a copying process failed\n");
			return 1;
		}
		for (int it = 0; it < iters; it++) {
			t[it] = 0.0;
			for (int r = 0; r < world; r++)
				if (sh->t[(size_t)it * world + r] > t[it])
					t[it] = sh->t[(size_t)it * world + r];
		}
		qsort(t, (size_t)iters, sizeof(*t), cmp_double);
		double med = t[iters / 2];
		printf("%g %.3f %.3f\n", mb[k], med * 1e3, mb[k] * 1e6 / med / 1e9);
		fflush(stdout);
	}
	free(t);
	munmap(sh, shbytes);
	return 0;
}

static int rank_main(int rank, int world, int port, int iters, const struct bench_opts *bo,
		     int nsizes, const double *mb)
{
	struct store_opts so = {.master_addr = "127.0.0.1",
				.master_port = port,
				.rank = rank,
				.world_size = world,
				.job = "allreduce-bench",
				.timeout_s = 30};
	struct comm_cpu_opts co = {
	    .timeout_s = 60, .chunk_bytes = bo->chunk, .tcp_only = bo->tcp_only};
	struct store *st;
	struct comm *c;
	struct dp_error err;
	char node[32];
	if (bo->from_env) {
		so.master_addr = getenv(ENV_MASTER_ADDR);
		so.master_port = getenv(ENV_MASTER_PORT) ? atoi(getenv(ENV_MASTER_PORT)) : 0;
		so.secret = getenv(ENV_DPTRAIN_STORE_SECRET);
	}
	if (bo->nodes > 0) {
		snprintf(node, sizeof(node), "n%d", rank % bo->nodes);
		co.node = node;
	}
	if (!so.master_addr || !so.master_port) {
		fprintf(stderr, "allreduce-bench: -e: MASTER_ADDR and MASTER_PORT are not set\n");
		return 1;
	}
	if (store_open(&st, &so, &err) < 0 || comm_cpu_create(&c, st, &co, &err) < 0) {
		fprintf(stderr, "allreduce-bench: rank %d: %s\n", rank, err.text);
		return 1;
	}
	if (rank == 0)
		fprintf(stderr, "allreduce-bench: %d ranks, %s\n", world, c->ops->name);
	double *t = calloc((size_t)iters, sizeof(*t));
	float *shared = NULL;
	if (bo->shared) {
		size_t most = 0;
		for (int k = 0; k < nsizes; k++)
			if ((size_t)(mb[k] * 1e6 / 4) > most)
				most = (size_t)(mb[k] * 1e6 / 4);
		void *sh = NULL;
		if (c->ops->shared_alloc(c, most * sizeof(float), &sh, &err) < 0) {
			fprintf(stderr, "allreduce-bench: rank %d: %s\n", rank, err.text);
			return 1;
		}
		shared = sh;
		if (rank == 0)
			fprintf(stderr, "allreduce-bench: %s\n",
				shared ? "buffers in the comm's shared buffer"
				       : "no shared buffer here: buffers of the ranks' own");
	}
	for (int k = 0; k < nsizes; k++) {
		size_t count = (size_t)(mb[k] * 1e6 / 4);
		float *buf = shared ? shared : malloc(count * sizeof(float));
		for (size_t i = 0; i < count; i++)
			buf[i] = (float)((i * 2654435761u + (unsigned)rank) % 1000) * 1e-3f;
		for (int it = -2; it < iters; it++) { /* two warm-up rounds */
			if (c->ops->barrier(c, &err) < 0)
				goto fail;
			double t0 = now_s();
			if (c->ops->allreduce(c, buf, count, COMM_F32, COMM_AVG, &err) < 0)
				goto fail;
			if (it >= 0)
				t[it] = now_s() - t0;
		}
		/* and the sums right: small integers, exact in any order */
		for (size_t i = 0; i < count; i++)
			buf[i] = (float)(i % 7 + (size_t)rank);
		if (c->ops->allreduce(c, buf, count, COMM_F32, COMM_SUM, &err) < 0)
			goto fail;
		for (size_t i = 0; i < count; i++)
			if (buf[i] != (float)((i % 7) * (size_t)world +
					      (size_t)world * (size_t)(world - 1) / 2)) {
				fprintf(stderr,
					"allreduce-bench: rank %d: %g MB: element %zu is %g, "
					"not the sum\n",
					rank, mb[k], i, (double)buf[i]);
				return 1;
			}
		if (buf != shared)
			free(buf);
		qsort(t, (size_t)iters, sizeof(*t), cmp_double);
		double med = t[iters / 2];
		if (rank == 0) {
			printf("%g %.3f %.3f\n", mb[k], med * 1e3, mb[k] * 1e6 / med / 1e9);
			fflush(stdout);
		}
		continue;
	fail:
		fprintf(stderr, "allreduce-bench: rank %d: %s\n", rank, err.text);
		return 1;
	}
	free(t);
	c->ops->destroy(c);
	store_close(st, 30);
	return 0;
}

int main(int argc, char **argv)
{
	int world = 2, iters = 20, opt, memcpy_only = 0, world_set = 0;
	struct bench_opts bo = {0};
	double sizes[32] = {1, 11.2, 44.8, 102};
	int nsizes = 4;
	while ((opt = getopt(argc, argv, "w:i:c:tn:mes")) != -1) {
		switch (opt) {
		case 'w':
			world = atoi(optarg);
			world_set = 1;
			break;
		case 'i':
			iters = atoi(optarg);
			break;
		case 'c':
			bo.chunk = (size_t)atol(optarg);
			break;
		case 't':
			bo.tcp_only = 1;
			break;
		case 'n':
			bo.nodes = atoi(optarg);
			break;
		case 'm':
			memcpy_only = 1;
			break;
		case 'e':
			bo.from_env = 1;
			break;
		case 's':
			bo.shared = 1;
			break;
		default:
			fprintf(
			    stderr,
			    "usage: %s [-w WORLD] [-i ITERS] [-c CHUNK_BYTES] [-t] [-n NODES] [-s] "
			    "[-m] [-e] [SIZE_MB...]\n",
			    argv[0]);
			return 2;
		}
	}
	if (optind < argc) {
		nsizes = 0;
		for (int i = optind; i < argc && nsizes < 32; i++)
			sizes[nsizes++] = atof(argv[i]);
	}
	if (world < 1 || world > 64 || iters < 1) {
		fprintf(stderr, "allreduce-bench: -w 1..64, -i 1 or more\n");
		return 2;
	}
	if (memcpy_only && world_set)
		return memcpy_par_main(world, iters, nsizes, sizes);
	if (memcpy_only)
		return memcpy_main(iters, nsizes, sizes);
	if (bo.from_env) {
		const char *r = getenv(ENV_RANK), *w = getenv(ENV_WORLD_SIZE);
		if (!r || !w) {
			fprintf(stderr, "allreduce-bench: -e: RANK and WORLD_SIZE are not set\n");
			return 2;
		}
		return rank_main(atoi(r), atoi(w), 0, iters, &bo, nsizes, sizes);
	}
	int port = free_port();
	pid_t *pid = calloc((size_t)world, sizeof(*pid));
	fflush(stdout);
	for (int r = 0; r < world; r++) {
		pid[r] = fork();
		if (pid[r] == 0)
			_exit(rank_main(r, world, port, iters, &bo, nsizes, sizes));
	}
	int rc = 0, left = world;
	while (left > 0) {
		int st;
		pid_t p = wait(&st);
		if (p < 0)
			break;
		for (int r = 0; r < world; r++)
			if (pid[r] == p)
				pid[r] = 0;
		left--;
		if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && !rc) {
			rc = 1;
			for (int r = 0; r < world; r++) /* the others would wait in vain */
				if (pid[r] > 0)
					kill(pid[r], SIGKILL);
		}
	}
	free(pid);
	return rc;
}
