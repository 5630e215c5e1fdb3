/* store_scale.c — the rendezvous store (store/) with hundreds of ranks, for correctness, not
 * time: 64 and 512 ranks as threads of this process against rank 0's store on 127.0.0.1 do
 * what the launchers' store does (launcher/alloc_store.c): open, publish a record, rank 0
 * gathers every record in rank order (store_get_many: all asked at once, answered as they are
 * set) and publishes the table, every node's writer reads it, a counter, a barrier, goodbye;
 * and rank 0's get of a key nobody sets times out naming it. Every record, the table at every
 * writer, the counter and the host names a rank without a rank table learns are checked; and
 * the server's elementary steps (store_server_steps: keys compared, waiters answered,
 * deadlines and events handled), counted, not timed, must not grow per rank with the job: an
 * O(n) step per request would make them 8 times more per rank at 512 than at 64.
 * contrib/bench/rendezvous-bench.c times the same at 4,096 ranks. */
#define _GNU_SOURCE
#include "store/store.h"
#include "t/lib/tap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define PER_NODE 8
#define WAIT_S	 60 /* a hang guard, far above what the job takes */

struct job {
	int world, port, named;
	const char **hosts;
	atomic_int bad;	     /* ranks that failed or saw a wrong value */
	atomic_int table_ok; /* writers that read the right table */
	atomic_int names_ok; /* ranks that named a far rank right */
	char *table;	     /* rank 0's, once published */
	char why[256];
	pthread_mutex_t mu;
	unsigned long steps;
};

struct arg {
	struct job *j;
	int rank;
};

static void record(int rank, char *buf, size_t len)
{
	snprintf(buf, len, "node%d 10.0.%d.%d local=%d", rank / PER_NODE, rank >> 8, rank & 255,
		 rank % PER_NODE);
}

static void bad_rank(struct job *j, int rank, const char *what, const char *text)
{
	pthread_mutex_lock(&j->mu);
	if (!atomic_load(&j->bad))
		snprintf(j->why, sizeof(j->why), "rank %d: %s: %s", rank, what, text);
	pthread_mutex_unlock(&j->mu);
	atomic_fetch_add(&j->bad, 1);
}

static void *rank_main(void *p)
{
	struct job *j = ((struct arg *)p)->j;
	int rank = ((struct arg *)p)->rank;
	char key[64], rec[96], name[128], want[128];
	struct store *st = NULL;
	struct store_opts o = {.master_addr = "127.0.0.1",
			       .master_port = j->port,
			       .rank = rank,
			       .world_size = j->world,
			       .job = "scale",
			       .secret = "0123456789abcdef0123456789abcdef",
			       .hosts = j->hosts,
			       .timeout_s = WAIT_S};
	struct dp_error err;
	void *v = NULL;
	size_t n;
	long count;
	if (store_open(&st, &o, &err) < 0) {
		bad_rank(j, rank, "open", err.text);
		return NULL;
	}
	snprintf(key, sizeof(key), "rec.%d", rank);
	record(rank, rec, sizeof(rec));
	if (store_set(st, key, rec, strlen(rec), &err) < 0)
		goto out_fail;
	if (rank == 0) {
		/* every record asked for at once, as the launcher does: most are not set yet, so
		 * their replies come as the ranks set them, in any order */
		size_t used = 0, cap = (size_t)j->world * 96;
		char *all = malloc(cap), **keys = calloc((size_t)j->world, sizeof(*keys));
		void **vals = calloc((size_t)j->world, sizeof(*vals));
		size_t *lens = calloc((size_t)j->world, sizeof(*lens));
		for (int r = 0; keys && r < j->world; r++)
			if (asprintf(&keys[r], "rec.%d", r) < 0)
				bail_out("out of memory");
		if (!all || !keys || !vals || !lens)
			bail_out("out of memory");
		int got = store_get_many(st, (const char *const *)keys, (size_t)j->world, vals,
					 lens, WAIT_S, &err);
		for (int r = 0; got == 0 && r < j->world; r++) {
			record(r, rec, sizeof(rec));
			if (lens[r] != strlen(rec) || memcmp(vals[r], rec, lens[r]) != 0)
				bad_rank(j, rank, "a record", keys[r]);
			memcpy(all + used, vals[r], lens[r]);
			used += lens[r];
			all[used++] = '\n';
		}
		for (int r = 0; r < j->world; r++) {
			free(vals[r]);
			free(keys[r]);
		}
		free(vals);
		free(lens);
		free(keys);
		if (got < 0 || store_set(st, "table", all, used, &err) < 0) {
			free(all);
			goto out_fail;
		}
		all[used - 1] = 0;
		j->table = all; /* freed after every thread ended */
	}
	if (rank % PER_NODE == 0) {
		if (store_get(st, "table", &v, &n, WAIT_S, &err) < 0)
			goto out_fail;
		/* the table is every record in rank order: check the first, a middle and the last
		 */
		int good = n > 0 && ((char *)v)[n - 1] == '\n';
		for (int r = 0; good && r < j->world; r += j->world / 2 - 1) {
			record(r, rec, sizeof(rec));
			good = memmem(v, n, rec, strlen(rec)) != NULL;
		}
		if (good)
			atomic_fetch_add(&j->table_ok, 1);
		free(v);
		v = NULL;
	}
	if (store_add(st, "count", 1, &count, &err) < 0 ||
	    store_barrier(st, "counted", WAIT_S, &err) < 0)
		goto out_fail;
	snprintf(key, sizeof(key), "count");
	if (store_get(st, key, &v, &n, WAIT_S, &err) < 0)
		goto out_fail;
	snprintf(rec, sizeof(rec), "%d", j->world);
	if (n != strlen(rec) || memcmp(v, rec, n) != 0)
		bad_rank(j, rank, "the counter", rec);
	free(v);
	/* a far rank's host: the rank table's, or the one its hello gave */
	int far = (rank + j->world / 2) % j->world;
	store_rank_name(st, far, name, sizeof(name));
	if (j->named)
		snprintf(want, sizeof(want), "rank %d (node%d)", far, far / PER_NODE);
	else {
		char host[64];
		gethostname(host, sizeof(host));
		host[sizeof(host) - 1] = 0;
		snprintf(want, sizeof(want), "rank %d (%s)", far, host);
	}
	if (strcmp(name, want) == 0)
		atomic_fetch_add(&j->names_ok, 1);
	else
		bad_rank(j, rank, "a far rank's name", name);
	if (rank == 0) {
		const char *two[] = {"rec.1", "never.set"};
		void *vals[2];
		size_t lens[2];
		if (store_get_many(st, two, 2, vals, lens, 0.2, &err) == 0 || vals[0] || vals[1] ||
		    !strstr(err.text, "key never.set was not set within 0.2 s"))
			bad_rank(j, rank, "a get of a key never set", err.text);
	}
	if (store_barrier(st, "done", WAIT_S, &err) < 0)
		goto out_fail;
	if (rank == 0)
		j->steps = store_server_steps(st);
	store_close(st, WAIT_S);
	return NULL;
out_fail:
	bad_rank(j, rank, "a request", err.text);
	store_close(st, 0);
	return NULL;
}

static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Runs a job of world ranks; hosts: the ranks are given a rank table's names. */
static void run(struct job *j, int world, int named)
{
	memset(j, 0, sizeof(*j));
	pthread_mutex_init(&j->mu, NULL);
	j->world = world;
	j->named = named;
	j->port = free_port();
	char **h = named ? calloc((size_t)world, sizeof(*h)) : NULL;
	for (int r = 0; h && r < world; r++)
		if (asprintf(&h[r], "node%d", r / PER_NODE) < 0)
			bail_out("out of memory");
	j->hosts = (const char **)h;
	pthread_t *t = calloc((size_t)world, sizeof(*t));
	struct arg *a = calloc((size_t)world, sizeof(*a));
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 << 10);
	if (!t || !a || j->port < 0)
		bail_out("cannot set up %d ranks", world);
	for (int r = 0; r < world; r++) {
		a[r] = (struct arg){j, r};
		if (pthread_create(&t[r], &attr, rank_main, &a[r]) != 0)
			bail_out("cannot start rank %d's thread", r);
	}
	for (int r = 0; r < world; r++)
		pthread_join(t[r], NULL);
	for (int r = 0; h && r < world; r++)
		free(h[r]);
	free(h);
	free(t);
	free(a);
}

int main(void)
{
	static const int worlds[] = {64, 512};
	unsigned long steps[2] = {0, 0};
	struct rlimit rl;
	/* rank 0 holds a descriptor per rank, and each rank its own: 2 x 512 and some */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1200 &&
	    rl.rlim_max != rl.rlim_cur) {
		rl.rlim_cur =
		    rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 4096 ? 4096 : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 1200)
		plan_skip_all("512 ranks in one process need 1,200 descriptors; the limit is %llu",
			      (unsigned long long)rl.rlim_cur);
	struct job j;
	for (int k = 0; k < 2; k++) {
		int w = worlds[k];
		run(&j, w, 1);
		ok(atomic_load(&j.bad) == 0, "%d ranks: every request answered right (%s)", w,
		   j.why[0] ? j.why : "none failed");
		is_int(atomic_load(&j.table_ok), w / PER_NODE,
		       "%d ranks: every node's writer read rank 0's table", w);
		is_int(atomic_load(&j.names_ok), w, "%d ranks: every rank names the others", w);
		steps[k] = j.steps;
		note("%d ranks: %lu server steps, %.1f per rank", w, j.steps, (double)j.steps / w);
		free(j.table);
	}
	ok(steps[0] > 0 && (double)steps[1] / worlds[1] < 2.0 * (double)steps[0] / worlds[0],
	   "the server's steps per rank do not grow with the job: %.1f at %d ranks, %.1f at %d "
	   "(< 2x)",
	   (double)steps[1] / worlds[1], worlds[1], (double)steps[0] / worlds[0], worlds[0]);
	/* without a rank table every rank learns every host name from the rendezvous */
	run(&j, 512, 0);
	ok(atomic_load(&j.bad) == 0, "512 ranks without a rank table: every request answered (%s)",
	   j.why[0] ? j.why : "none failed");
	is_int(atomic_load(&j.names_ok), 512,
	       "512 ranks without a rank table: each names a far rank by its hello's host");
	free(j.table);
	return done_testing();
}
