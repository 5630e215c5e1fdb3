/* rendezvous-bench.c — the rendezvous store (store/) at thousands of ranks, simulated on one
 * machine: rank 0 (its server and its own client) in this process, the other ranks as threads
 * of P forked processes, all on 127.0.0.1. Every rank does what the launchers' store does
 * (launcher/alloc_store.c): store_open (connect, the challenge-response, the rendezvous
 * barrier), sets its record; rank 0 gets every record in rank order, sets the table; every
 * node's writer (one rank in R) gets the table; a barrier; goodbye. Touches nothing but stdout.
 *
 *   rendezvous-bench [-n RANKS] [-p PROCS] [-r RANKS_PER_NODE] [-t TIMEOUT_S] [-H]
 *   (default 1024 ranks, 8 processes, 8 ranks per node, 120 s; -H: the ranks are given no
 *   host names, as without a rank table, and get them from the store)
 *
 * Output, one JSON object: open_ms (rank 0's store_open: every rank connected and proved it
 * is one), gather_ms (rank 0 has every record), table_ms (every writer has the table and every rank
 * is through the barrier after it), close_ms (rank 0's store_close: every goodbye), rank 0's
 * resident memory before the store started and at table_ms (rss_kb: the store's, with rank 0's own
 * client) and its peak, and rank 0's CPU time (the server thread's, nearly all). Times from the
 * moment every other rank's thread was released. */
#define _GNU_SOURCE
#include "store/store.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECRET "rendezvous-bench-secret-0123456789abcdef"

struct bench {
	int world, procs, per_node, port, no_hosts;
	double timeout;
	const char **hosts; /* world names "n<node>" (NULL with -H) */
	int go[2];	    /* the children block on go[0]; its closing releases them */
	int ready[2];	    /* each child writes a byte here once its threads wait */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int released; /* in a child: go[0] closed */
	atomic_int failed;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long status_kb(const char *field)
{
	char line[256];
	long kb = -1;
	size_t n = strlen(field);
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, field, n) == 0 && line[n] == ':') {
			kb = atol(line + n + 1);
			break;
		}
	if (f)
		fclose(f);
	return kb;
}

static double cpu_s(int who)
{
	struct rusage ru;
	getrusage(who, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static struct store_opts opts_of(const struct bench *b, int rank)
{
	return (struct store_opts){.master_addr = "127.0.0.1",
				   .master_port = b->port,
				   .rank = rank,
				   .world_size = b->world,
				   .job = "rendezvous-bench",
				   .secret = SECRET,
				   .hosts = b->hosts,
				   .timeout_s = b->timeout};
}

/* A rank's record, about as long as the launcher's (alloc_record_format). */
static int record(const struct bench *b, int rank, char *buf, size_t len)
{
	return snprintf(buf, len, "n%d 10.%d.%d.%d %d %d gpu=%d/8 id=GPU-%08x", rank / b->per_node,
			(rank >> 16) & 255, (rank >> 8) & 255, rank & 255, rank / b->per_node,
			rank % b->per_node, rank % b->per_node, (unsigned)rank * 2654435761u);
}

struct rank_arg {
	struct bench *b;
	int rank;
};

/* Every rank but 0: the launcher's part of a rank that is not rank 0. */
static void *rank_main(void *arg)
{
	struct bench *b = ((struct rank_arg *)arg)->b;
	int rank = ((struct rank_arg *)arg)->rank;
	struct store *st = NULL;
	struct store_opts o = opts_of(b, rank);
	struct dp_error err;
	char key[64], rec[160];
	void *v = NULL;
	size_t n;
	pthread_mutex_lock(&b->mu);
	while (!b->released)
		pthread_cond_wait(&b->cv, &b->mu);
	pthread_mutex_unlock(&b->mu);
	if (store_open(&st, &o, &err) < 0)
		goto fail;
	snprintf(key, sizeof(key), "rec.%d", rank);
	if (store_set(st, key, rec, (size_t)record(b, rank, rec, sizeof(rec)), &err) < 0)
		goto fail;
	if (rank % b->per_node == 0 && store_get(st, "table", &v, &n, b->timeout, &err) < 0)
		goto fail;
	free(v);
	if (store_barrier(st, "done", b->timeout, &err) < 0)
		goto fail;
	store_close(st, 10);
	return NULL;
fail:
	if (atomic_fetch_add(&b->failed, 1) < 3)
		fprintf(stderr, "rendezvous-bench: rank %d: %s\n", rank, err.text);
	store_close(st, 0);
	return NULL;
}

/* A child: ranks first, first + step, ... as threads; 0 when all of them got through. */
static int child_main(struct bench *b, int first, int step)
{
	int n = 0;
	for (int r = first; r < b->world; r += step)
		n++;
	pthread_t *t = calloc((size_t)n, sizeof(*t));
	struct rank_arg *args = calloc((size_t)n, sizeof(*args));
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 << 10);
	if (!t || !args)
		return 1;
	int k = 0;
	for (int r = first; r < b->world; r += step, k++) {
		args[k] = (struct rank_arg){b, r};
		if (pthread_create(&t[k], &attr, rank_main, &args[k]) != 0) {
			fprintf(stderr, "rendezvous-bench: thread %d: %s\n", r, strerror(errno));
			return 1;
		}
	}
	char c = 1, d;
	if (write(b->ready[1], &c, 1) != 1)
		return 1;
	while (read(b->go[0], &d, 1) < 0 && errno == EINTR)
		;
	pthread_mutex_lock(&b->mu);
	b->released = 1;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	for (k = 0; k < n; k++)
		pthread_join(t[k], NULL);
	return atomic_load(&b->failed) ? 1 : 0;
}

/* Rank 0, in this process. */
struct zero {
	struct bench *b;
	_Atomic double t0;
	double open_s, gather_s, table_s, close_s, cpu0, cpu_s;
	long rss0_kb, rss_kb;
	int ok;
	struct dp_error err;
};

static void *zero_main(void *arg)
{
	struct zero *z = arg;
	struct bench *b = z->b;
	struct store *st = NULL;
	struct store_opts o = opts_of(b, 0);
	char rec[160];
	char *all = NULL;
	size_t used = 0, cap = 0;
	if (store_open(&st, &o, &z->err) < 0)
		return NULL;
	z->open_s = now_s() - z->t0;
	if (store_set(st, "rec.0", rec, (size_t)record(b, 0, rec, sizeof(rec)), &z->err) < 0)
		goto out;
	/* as launcher/alloc_store.c does: every record asked for at once */
	char **keys = calloc((size_t)b->world, sizeof(*keys));
	void **v = calloc((size_t)b->world, sizeof(*v));
	size_t *len = calloc((size_t)b->world, sizeof(*len));
	for (int r = 0; keys && r < b->world; r++)
		if (asprintf(&keys[r], "rec.%d", r) < 0)
			keys[r] = NULL;
	if (!keys || !v || !len ||
	    store_get_many(st, (const char *const *)keys, (size_t)b->world, v, len, b->timeout,
			   &z->err) < 0)
		goto out;
	for (int r = 0; r < b->world; r++) {
		if (used + len[r] + 2 > cap) {
			cap = 2 * (used + len[r] + 2);
			all = realloc(all, cap);
		}
		memcpy(all + used, v[r], len[r]);
		used += len[r];
		all[used++] = '\n';
		free(v[r]);
		free(keys[r]);
	}
	free(keys);
	free(v);
	free(len);
	z->gather_s = now_s() - z->t0;
	if (store_set(st, "table", all, used, &z->err) < 0 ||
	    store_barrier(st, "done", b->timeout, &z->err) < 0)
		goto out;
	z->table_s = now_s() - z->t0;
	z->rss_kb = status_kb("VmRSS");
	z->ok = 1;
out:
	free(all);
	store_close(st, z->ok ? b->timeout : 0);
	z->close_s = now_s() - z->t0;
	z->cpu_s = cpu_s(RUSAGE_SELF) - z->cpu0;
	return NULL;
}

static int hold_port(int *fd)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	int one = 1;
	*fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*fd < 0 || setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(*fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(*fd, (struct sockaddr *)&a, &l) < 0) {
		perror("rendezvous-bench: port");
		exit(1);
	}
	return ntohs(a.sin_port);
}

static int until_listening(int port)
{
	double t0 = now_s();
	while (now_s() - t0 < 30) {
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_port = htons((uint16_t)port),
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int c = fd >= 0 ? connect(fd, (struct sockaddr *)&a, sizeof(a)) : -1;
		if (fd >= 0)
			close(fd);
		if (c == 0)
			return 0;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct bench b = {.world = 1024, .procs = 8, .per_node = 8, .timeout = 120};
	int opt, held;
	while ((opt = getopt(argc, argv, "n:p:r:t:H")) != -1) {
		switch (opt) {
		case 'n':
			b.world = atoi(optarg);
			break;
		case 'p':
			b.procs = atoi(optarg);
			break;
		case 'r':
			b.per_node = atoi(optarg);
			break;
		case 't':
			b.timeout = atof(optarg);
			break;
		case 'H':
			b.no_hosts = 1;
			break;
		default:
			fprintf(stderr, "usage: rendezvous-bench [-n RANKS] [-p PROCS] "
					"[-r RANKS_PER_NODE] [-t TIMEOUT_S] [-H]\n");
			return 2;
		}
	}
	if (b.world < 2 || b.procs < 1 || b.per_node < 1)
		return 2;
	if (b.procs > b.world - 1)
		b.procs = b.world - 1;
	/* every rank's connection is a descriptor in rank 0 and one in a child */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (!b.no_hosts) {
		char **h = calloc((size_t)b.world, sizeof(*h));
		for (int r = 0; r < b.world; r++)
			if (asprintf(&h[r], "n%d", r / b.per_node) < 0)
				return 1;
		b.hosts = (const char **)h;
	}
	b.port = hold_port(&held);
	pthread_mutex_init(&b.mu, NULL);
	pthread_cond_init(&b.cv, NULL);
	if (pipe(b.go) < 0 || pipe(b.ready) < 0)
		return 1;
	pid_t *pid = calloc((size_t)b.procs, sizeof(*pid));
	for (int p = 0; p < b.procs; p++) {
		pid[p] = fork();
		if (pid[p] < 0) {
			perror("rendezvous-bench: fork");
			return 1;
		}
		if (pid[p] == 0) {
			close(held);
			close(b.go[1]);
			close(b.ready[0]);
			_exit(child_main(&b, 1 + p, b.procs));
		}
	}
	close(b.go[0]);
	close(b.ready[1]);
	for (int p = 0; p < b.procs; p++) {
		char c;
		if (read(b.ready[0], &c, 1) != 1) {
			fprintf(stderr,
				"rendezvous-bench: a child died before its ranks were ready\n");
			return 1;
		}
	}
	struct zero z = {.b = &b};
	z.rss0_kb = status_kb("VmRSS");
	z.cpu0 = cpu_s(RUSAGE_SELF);
	z.t0 = now_s() + 3600;
	pthread_t zt;
	pthread_create(&zt, NULL, zero_main, &z);
	/* the other ranks go once rank 0 listens: what is timed is the store, not their first
	 * connection's retry interval */
	if (until_listening(b.port) < 0) {
		fprintf(stderr, "rendezvous-bench: rank 0's store does not listen\n");
		return 1;
	}
	close(held);
	z.t0 = now_s();
	close(b.go[1]);
	pthread_join(zt, NULL);
	int bad = 0;
	for (int p = 0; p < b.procs; p++) {
		int status;
		waitpid(pid[p], &status, 0);
		bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	if (!z.ok || bad) {
		fprintf(stderr, "rendezvous-bench: %s%s%d of %d processes failed\n",
			z.ok ? "" : z.err.text, z.ok ? "" : "; ", bad, b.procs);
		return 1;
	}
	printf("{\"ranks\": %d, \"procs\": %d, \"ranks_per_node\": %d, \"hosts_given\": %s, "
	       "\"open_ms\": %.1f, \"gather_ms\": %.1f, \"table_ms\": %.1f, \"close_ms\": %.1f, "
	       "\"rss_before_kb\": %ld, "
	       "\"rss_kb\": %ld, \"hwm_kb\": %ld, \"rank0_cpu_s\": %.3f, \"children_cpu_s\": "
	       "%.3f}\n",
	       b.world, b.procs, b.per_node, b.no_hosts ? "false" : "true", z.open_s * 1e3,
	       z.gather_s * 1e3, z.table_s * 1e3, z.close_s * 1e3, z.rss0_kb, z.rss_kb,
	       status_kb("VmHWM"), z.cpu_s, cpu_s(RUSAGE_CHILDREN));
	return 0;
}
