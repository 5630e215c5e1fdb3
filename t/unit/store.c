/* store.c — unit tests for the rendezvous store (trainer/store.c): set/get/add/barrier between
 * forked ranks on 127.0.0.1, the messages for a barrier timeout, a port in use, an unreachable
 * master, a foreign job and a duplicate rank, and the liveness verdicts (a rank that dies, a
 * rank that does not report a timeout, an abort). The parent kills whatever is left. */
#define _GNU_SOURCE
#include "ranks.h"
#include "store.h"
#include "tap.h"

#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct store_opts opts(const struct ranks_job *j, int rank, int world, const char *job,
			      double timeout)
{
	return (struct store_opts){.master_addr = "127.0.0.1",
				   .master_port = j->port,
				   .rank = rank,
				   .world_size = world,
				   .job = job,
				   .timeout_s = timeout};
}

/* Opens rank's store in an unnamed job of 3 ranks; if it cannot, msg says why. */
static int open3(const struct ranks_job *j, int rank, struct store **st, char *msg, size_t len)
{
	struct store_opts o = opts(j, rank, 3, "", 10);
	char err[1024];
	*st = NULL;
	if (store_open(st, &o, err, sizeof(err)) == 0)
		return 0;
	snprintf(msg, len, "open: %s", err);
	return -1;
}

/* In a rank: the first failed expectation goes to msg. */
#define EXPECT(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			snprintf(msg, len, __VA_ARGS__);                                           \
			rv = -1;                                                                   \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* ---------------------------------------------------------------------------------------
 * Scenarios. */

static int rank_kv(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st = NULL;
	struct store_opts o = opts(j, rank, 3, "1234.0", 10);
	char err[1024];
	void *v = NULL;
	size_t n;
	long sum;
	int rv = 0;
	EXPECT(store_open(&st, &o, err, sizeof(err)) == 0, "open: %s", err);
	EXPECT(store_rank(st) == rank && store_world_size(st) == 3, "rank/world");
	EXPECT(strcmp(store_local_addr(st), "127.0.0.1") == 0, "local addr %s",
	       store_local_addr(st));
	if (rank == 0)
		EXPECT(store_set(st, "greeting", "hello", 5, err, sizeof(err)) == 0, "set: %s",
		       err);
	EXPECT(store_get(st, "greeting", &v, &n, 5, err, sizeof(err)) == 0, "get: %s", err);
	EXPECT(n == 5 && strcmp(v, "hello") == 0, "get greeting: %zu bytes '%s'", n, (char *)v);
	free(v);
	v = NULL;

	/* get waits for a later set */
	if (rank == 2) {
		ranks_sleep(0.3);
		EXPECT(store_set(st, "late", "x\0y", 3, err, sizeof(err)) == 0, "set: %s", err);
	} else {
		double t0 = ranks_now();
		EXPECT(store_get(st, "late", &v, &n, 5, err, sizeof(err)) == 0, "get late: %s",
		       err);
		EXPECT(ranks_now() - t0 > 0.2, "get late returned after %.2f s", ranks_now() - t0);
		EXPECT(n == 3 && memcmp(v, "x\0y", 4) == 0, "get late: wrong value");
		free(v);
		v = NULL;
	}

	/* a large value */
	if (rank == 1) {
		char *big = malloc(1 << 20);
		for (int i = 0; i < 1 << 20; i++)
			big[i] = (char)(i * 7);
		int ok = store_set(st, "big", big, 1 << 20, err, sizeof(err));
		free(big);
		EXPECT(ok == 0, "set big: %s", err);
	}
	EXPECT(store_get(st, "big", &v, &n, 5, err, sizeof(err)) == 0, "get big: %s", err);
	EXPECT(n == 1 << 20, "big is %zu bytes", n);
	for (size_t i = 0; i < n; i++)
		EXPECT(((char *)v)[i] == (char)(i * 7), "big: byte %zu differs", i);
	free(v);
	v = NULL;

	EXPECT(store_add(st, "count", rank + 1, &sum, err, sizeof(err)) == 0, "add: %s", err);
	EXPECT(sum >= rank + 1 && sum <= 6, "add returned %ld", sum);
	EXPECT(store_barrier(st, "added", 15, err, sizeof(err)) == 0, "barrier: %s", err);
	EXPECT(store_get(st, "count", &v, &n, 1, err, sizeof(err)) == 0, "get count: %s", err);
	EXPECT(strcmp(v, "6") == 0, "count is '%s', want 6", (char *)v);
	free(v);
	v = NULL;
	EXPECT(store_add(st, "greeting", 1, &sum, err, sizeof(err)) < 0, "add to a string worked");

	/* a key never set */
	EXPECT(store_get(st, "never", &v, &n, 0.3, err, sizeof(err)) < 0, "get never worked");
	EXPECT(strstr(err, "never") && strstr(err, "not set"), "get never: %s", err);

	/* a barrier rank 2 does not enter: the others' message names it */
	if (rank != 2) {
		EXPECT(store_barrier(st, "partial", 0.5, err, sizeof(err)) < 0, "barrier worked");
		snprintf(msg, len, "%s", err);
	}
	/* the same name again, now with everyone */
	EXPECT(store_barrier(st, "again", 15, err, sizeof(err)) == 0, "barrier again: %s", err);
	for (int i = 0; i < 20; i++)
		EXPECT(store_barrier(st, "loop", 15, err, sizeof(err)) == 0, "barrier loop: %s",
		       err);
	char name[64];
	EXPECT(strcmp(store_rank_name(st, 1, name, sizeof(name)), "rank 1") != 0 &&
		   strncmp(name, "rank 1 (", 8) == 0,
	       "rank name '%s'", name);
out:
	free(v);
	store_close(st, 5);
	return rv;
}

/* Rank 0 serves job A; rank 1 is of job B; a third process claims rank 1 again. */
static int rank_foreign(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st = NULL;
	struct store_opts o = opts(j, rank == 2 ? 1 : rank, 2, rank == 1 ? "B" : "A", 2);
	if (rank == 1)
		ranks_sleep(0.2);
	if (rank == 2)
		o.world_size = 3;
	if (store_open(&st, &o, msg, len) == 0) {
		snprintf(msg, len, "opened");
		store_close(st, 1);
	}
	return 0;
}

static int rank_duplicate(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st = NULL;
	struct store_opts o = opts(j, rank == 2 ? 1 : rank, 2, "A", 3);
	if (rank == 2)
		ranks_sleep(0.5); /* after the real rank 1 */
	if (store_open(&st, &o, msg, len) == 0) {
		snprintf(msg, len, "opened");
		ranks_sleep(1.0);
		store_close(st, 1);
	}
	return 0;
}

/* Rank 2 dies without goodbye; the others hear of it at once. */
static int rank_death(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	char err[1024];
	int rv = 0;
	if (open3(j, rank, &st, msg, len) < 0)
		return -1;
	if (rank == 2) {
		ranks_sleep(0.2);
		_exit(9);
	}
	double t0 = ranks_now();
	struct pollfd p = {.fd = store_fd(st), .events = POLLIN};
	EXPECT(poll(&p, 1, 5000) == 1, "the store's descriptor did not become readable");
	EXPECT(store_poll_abort(st, 5, err, sizeof(err)) == 1, "no abort");
	snprintf(msg, len, "%.2f|%s", ranks_now() - t0, err);
	EXPECT(store_set(st, "k", "v", 1, err, sizeof(err)) < 0, "set after the abort worked");
out:
	store_close(st, 1);
	return rv;
}

/* Ranks 0 and 2 time out in a collective; rank 1 does not report: it is named. */
static int rank_report(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	char err[1024];
	if (open3(j, rank, &st, msg, len) < 0)
		return -1;
	if (rank == 1) {
		ranks_sleep(2.5);
	} else {
		double t0 = ranks_now();
		store_report_timeout(st, 17, "allreduce", rank == 0 ? 2 : 1, 30, 1.0, err,
				     sizeof(err));
		snprintf(msg, len, "%.2f|%s", ranks_now() - t0, err);
	}
	store_close(st, 3);
	return 0;
}

/* Rank 1 aborts the job. */
static int rank_abort(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	char err[1024];
	int rv = 0;
	if (open3(j, rank, &st, msg, len) < 0)
		return -1;
	if (rank == 1) {
		store_abort(st, "rank 1: loss is nan");
		snprintf(msg, len, "aborted");
	} else {
		EXPECT(store_poll_abort(st, 5, err, sizeof(err)) == 1, "no abort");
		snprintf(msg, len, "%s", err);
	}
out:
	store_close(st, 3);
	return rv;
}

/* Rank 0 closes first; rank 2 still uses the store for a while before its goodbye. */
static int rank_close(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	char err[1024];
	void *v = NULL;
	size_t n;
	int rv = 0;
	if (open3(j, rank, &st, msg, len) < 0)
		return -1;
	if (rank == 2) {
		ranks_sleep(0.5);
		EXPECT(store_set(st, "late", "1", 1, err, sizeof(err)) == 0, "set: %s", err);
		EXPECT(store_get(st, "late", &v, &n, 1, err, sizeof(err)) == 0, "get: %s", err);
		EXPECT(store_poll_abort(st, 0, err, sizeof(err)) == 0, "an abort: %s", err);
	}
	double t0 = ranks_now();
	store_close(st, 5);
	st = NULL;
	snprintf(msg, len, "%.2f", ranks_now() - t0);
out:
	free(v);
	store_close(st, 1);
	return rv;
}

/* Runs fn as the 3 ranks of a job, for up to 20 s. */
static void run3(ranks_fn fn, struct ranks_out *out)
{
	struct ranks_job j = {.world = 3};
	ranks_run(&j, fn, -1, 20, out);
}

int main(void)
{
	struct ranks_out out[RANKS_MAX];
	char err[1024];
	double t0 = ranks_now();

	{
		run3(rank_kv, out);
		for (int r = 0; r < 3; r++)
			ok(out[r].status == 0, "set/get/add/barrier on rank %d%s%s", r,
			   out[r].status ? ": " : "", out[r].status ? out[r].msg : "");
		for (int r = 0; r < 2; r++) {
			like(out[r].msg,
			     "barrier partial: 1 of 3 ranks did not arrive within 0.5 s: "
			     "rank 2 (",
			     "a barrier timeout on rank %d names the rank missing", r);
		}
		note("%s", out[0].msg);
	}
	{
		/* someone else has the port */
		struct ranks_job j = {.port = ranks_free_port()};
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)j.port)};
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct store *st = NULL;
		struct store_opts o = opts(&j, 0, 2, "", 1);
		char port[32];
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0)
			bail_out("cannot bind a port for the test");
		ok(store_open(&st, &o, err, sizeof(err)) < 0, "rank 0 cannot bind a port in use");
		snprintf(port, sizeof(port), "port %d", j.port);
		like(err, port, "the message names the port");
		like(err, "already in use", "the message says it is in use");
		note("%s", err);
		close(fd);
	}
	{
		/* nobody listens */
		struct ranks_job j = {.port = ranks_free_port()};
		struct store *st = NULL;
		struct store_opts o = opts(&j, 1, 2, "", 1);
		char where[64];
		double t = ranks_now();
		ok(store_open(&st, &o, err, sizeof(err)) < 0, "no rank 0: open fails");
		t = ranks_now() - t;
		ok(t >= 0.9 && t < 3, "after the timeout (%.2f s)", t);
		snprintf(where, sizeof(where), "127.0.0.1:%d", j.port);
		like(err, where, "the message names the master's address");
		like(err, "Connection refused", "and why");
		like(err, "rank 0 may not have started", "and what it may mean");
		note("%s", err);
	}
	{
		run3(rank_foreign, out);
		like(out[1].msg, "belongs to job 'B'", "a rank of another job is refused");
		like(out[1].msg, "serves job 'A'", "the message names both jobs");
		note("%s", out[1].msg);
		like(out[2].msg, "says the job has 3 ranks but rank 0 says 2",
		     "a rank with another world size is refused");
		like(out[0].msg, "1 of 2 ranks did not connect within 2 s: rank 1",
		     "rank 0 names the rank that did not join");
		note("%s", out[0].msg);
	}
	{
		run3(rank_duplicate, out);
		is(out[0].msg, "opened", "rank 0 opens");
		is(out[1].msg, "opened", "rank 1 opens");
		like(out[2].msg, "rank 1 is already connected", "a second rank 1 is refused");
		note("%s", out[2].msg);
	}
	{
		run3(rank_death, out);
		for (int r = 0; r < 2; r++) {
			like(out[r].msg, "|rank 2 (", "a death: rank %d hears it", r);
			like(out[r].msg, "died (its connection to the rendezvous store closed)",
			     "a death: rank %d is told what happened", r);
			ok(out[r].status == 0 && atof(out[r].msg) < 3, "at once (%.2f s)",
			   atof(out[r].msg));
		}
		note("%s", out[0].msg);
	}
	{
		run3(rank_report, out);
		for (int r = 0; r < 3; r += 2) {
			like(out[r].msg, "rank 1 (", "a timeout: rank %d's verdict names rank 1",
			     r);
			like(out[r].msg,
			     "stopped taking part: 2 of 3 ranks timed out after 30 s in "
			     "allreduce #17",
			     "a timeout: rank %d's verdict says what happened", r);
			double t = atof(out[r].msg);
			ok(t > 0.5 && t < 5, "after the grace (%.2f s)", t);
		}
		note("%s", out[0].msg);
	}
	{
		run3(rank_abort, out);
		is(out[0].msg, "rank 1: loss is nan", "an abort reaches rank 0");
		is(out[2].msg, "rank 1: loss is nan", "an abort reaches rank 2");
	}
	{
		run3(rank_close, out);
		if (!ok(out[2].status == 0, "a rank still uses the store after rank 0 closed it"))
			diag("%s", out[2].msg);
		ok(atof(out[0].msg) > 0.3, "rank 0's close waited for the others (%s s)",
		   out[0].msg);
	}
	diag("store tests took %.1f s", ranks_now() - t0);
	return done_testing();
}
