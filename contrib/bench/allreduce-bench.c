/* allreduce-bench.c — allreduce bandwidth of the CPU collective engine (trainer/dist/comm_cpu.c):
 * W forked ranks on 127.0.0.1 allreduce float32 buffers of several sizes; rank 0 prints the
 * median time and the algorithm bandwidth (size / time, as PyTorch reports it) per size.
 * allreduce-gloo.py measures torch.distributed's gloo the same way; allreduce-bench.sh runs
 * both. Touches nothing but stdout.
 *
 *   allreduce-bench [-w WORLD] [-i ITERS] [-c CHUNK_BYTES] [SIZE_MB...]
 *   (default: 2 ranks, 20 iterations, 1 11.2 44.8 102 MB; MB = 10^6 bytes)
 * Output, one line per size: "size_mb median_ms GB/s". */
#define _GNU_SOURCE
#include "trainer/dist/comm.h"
#include "store/store.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int rank_main(int rank, int world, int port, int iters, size_t chunk, int nsizes,
		     const double *mb)
{
	struct store_opts so = {.master_addr = "127.0.0.1",
				.master_port = port,
				.rank = rank,
				.world_size = world,
				.job = "allreduce-bench",
				.timeout_s = 30};
	struct comm_cpu_opts co = {.timeout_s = 60, .chunk_bytes = chunk};
	struct store *st;
	struct comm *c;
	struct dp_error err;
	if (store_open(&st, &so, &err) < 0 || comm_cpu_create(&c, st, &co, &err) < 0) {
		fprintf(stderr, "allreduce-bench: rank %d: %s\n", rank, err.text);
		return 1;
	}
	double *t = calloc((size_t)iters, sizeof(*t));
	for (int k = 0; k < nsizes; k++) {
		size_t count = (size_t)(mb[k] * 1e6 / 4);
		float *buf = malloc(count * sizeof(float));
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
	int world = 2, iters = 20, opt;
	size_t chunk = 0;
	double sizes[32] = {1, 11.2, 44.8, 102};
	int nsizes = 4;
	while ((opt = getopt(argc, argv, "w:i:c:")) != -1) {
		switch (opt) {
		case 'w':
			world = atoi(optarg);
			break;
		case 'i':
			iters = atoi(optarg);
			break;
		case 'c':
			chunk = (size_t)atol(optarg);
			break;
		default:
			fprintf(stderr,
				"usage: %s [-w WORLD] [-i ITERS] [-c CHUNK_BYTES] [SIZE_MB...]\n",
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
	int port = free_port();
	pid_t *pid = calloc((size_t)world, sizeof(*pid));
	fflush(stdout);
	for (int r = 0; r < world; r++) {
		pid[r] = fork();
		if (pid[r] == 0)
			_exit(rank_main(r, world, port, iters, chunk, nsizes, sizes));
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
