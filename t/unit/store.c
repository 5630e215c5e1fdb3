/* store.c — unit tests for the rendezvous store (trainer/store/store.c): set/get/add/barrier
 * between forked ranks on 127.0.0.1, the messages for a barrier timeout, a port in use, an
 * unreachable master, a foreign job and a duplicate rank, and the liveness verdicts (a rank that
 * never arrives, a rank that dies, a rank that does not answer a timeout's roll call, an abort, a
 * rank asked to stop during the rendezvous). The parent kills whatever is left.
 *
 * No check depends on how fast the machine is: what must happen before something else is made
 * to by a key the other rank waits for, elapsed times are only checked against lower bounds
 * that a chain of such waits guarantees, and the upper bounds are hang guards far above what
 * the scenario takes. */
#define _GNU_SOURCE
#include "t/lib/ranks.h"
#include "trainer/store/store.h"
#include "t/lib/tap.h"

#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received (glibc's lacks it) */
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HANG_S 30 /* a wait that only a broken store (or a stopped machine) lets run out */

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
	struct store_opts o = opts(j, rank, 3, "", HANG_S);
	struct dp_error err;
	*st = NULL;
	if (store_open(st, &o, &err) == 0)
		return 0;
	snprintf(msg, len, "open: %s", err.text);
	return -1;
}

/* Waits until rank 0's store accepts connections on j->port (the port is held, so until then
 * a connection is refused), so that a rank's own short timeout starts only once rank 0 is up:
 * a scenario about what happens after the connection does not depend on who started first. */
static int until_listening(const struct ranks_job *j, char *msg, size_t len)
{
	double t0 = ranks_now();
	for (;;) {
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_port = htons((uint16_t)j->port),
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		int fd = socket(AF_INET, SOCK_STREAM, 0), c;
		c = fd >= 0 ? connect(fd, (struct sockaddr *)&a, sizeof(a)) : -1;
		if (fd >= 0)
			close(fd);
		if (c == 0)
			return 0;
		if (ranks_now() - t0 > HANG_S) {
			snprintf(msg, len, "rank 0's store did not listen within %d s", HANG_S);
			return -1;
		}
		ranks_sleep(0.01);
	}
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
	struct store_opts o = opts(j, rank, 3, "1234.0", HANG_S);
	char key[64];
	struct dp_error err;
	void *v = NULL;
	size_t n;
	long sum;
	int rv = 0;
	EXPECT(store_open(&st, &o, &err) == 0, "open: %s", err.text);
	EXPECT(store_rank(st) == rank && store_world_size(st) == 3, "rank/world");
	EXPECT(strcmp(store_local_addr(st), "127.0.0.1") == 0, "local addr %s",
	       store_local_addr(st));
	if (rank == 0)
		EXPECT(store_set(st, "greeting", "hello", 5, &err) == 0, "set: %s", err.text);
	EXPECT(store_get(st, "greeting", &v, &n, HANG_S, &err) == 0, "get: %s", err.text);
	EXPECT(n == 5 && strcmp(v, "hello") == 0, "get greeting: %zu bytes '%s'", n, (char *)v);
	free(v);
	v = NULL;

	/* get waits for a later set: rank 2 sets "late" 0.3 s after it saw that ranks 0 and 1
	 * are about to get it, so their get returns no sooner than that, however slow they are */
	if (rank == 2) {
		for (int r = 0; r < 2; r++) {
			snprintf(key, sizeof(key), "getting.%d", r);
			EXPECT(store_get(st, key, &v, &n, HANG_S, &err) == 0, "get %s: %s", key,
			       err.text);
			free(v);
			v = NULL;
		}
		ranks_sleep(0.3);
		EXPECT(store_set(st, "late", "x\0y", 3, &err) == 0, "set: %s", err.text);
	} else {
		double t0 = ranks_now();
		snprintf(key, sizeof(key), "getting.%d", rank);
		EXPECT(store_set(st, key, "1", 1, &err) == 0, "set %s: %s", key, err.text);
		EXPECT(store_get(st, "late", &v, &n, HANG_S, &err) == 0, "get late: %s", err.text);
		EXPECT(ranks_now() - t0 >= 0.3, "get late returned after %.2f s", ranks_now() - t0);
		EXPECT(n == 3 && memcmp(v, "x\0y", 4) == 0, "get late: wrong value");
		free(v);
		v = NULL;
	}

	/* a large value */
	if (rank == 1) {
		char *big = malloc(1 << 20);
		for (int i = 0; i < 1 << 20; i++)
			big[i] = (char)(i * 7);
		int ok = store_set(st, "big", big, 1 << 20, &err);
		free(big);
		EXPECT(ok == 0, "set big: %s", err.text);
	}
	EXPECT(store_get(st, "big", &v, &n, HANG_S, &err) == 0, "get big: %s", err.text);
	EXPECT(n == 1 << 20, "big is %zu bytes", n);
	for (size_t i = 0; i < n; i++)
		EXPECT(((char *)v)[i] == (char)(i * 7), "big: byte %zu differs", i);
	free(v);
	v = NULL;

	EXPECT(store_add(st, "count", rank + 1, &sum, &err) == 0, "add: %s", err.text);
	EXPECT(sum >= rank + 1 && sum <= 6, "add returned %ld", sum);
	EXPECT(store_barrier(st, "added", HANG_S, &err) == 0, "barrier: %s", err.text);
	EXPECT(store_get(st, "count", &v, &n, HANG_S, &err) == 0, "get count: %s", err.text);
	EXPECT(strcmp(v, "6") == 0, "count is '%s', want 6", (char *)v);
	free(v);
	v = NULL;
	EXPECT(store_add(st, "greeting", 1, &sum, &err) < 0, "add to a string worked");

	/* a key never set: the server's timer, which cannot fire early */
	double t0 = ranks_now();
	EXPECT(store_get(st, "never", &v, &n, 0.3, &err) < 0, "get never worked");
	EXPECT(strstr(err.text, "never") && strstr(err.text, "not set"), "get never: %s", err.text);
	EXPECT(ranks_now() - t0 >= 0.3, "get never gave up after %.2f s", ranks_now() - t0);

	/* a barrier rank 2 does not enter (it goes on to the next): the others' message names it */
	if (rank != 2) {
		EXPECT(store_barrier(st, "partial", 0.5, &err) < 0, "barrier worked");
		snprintf(msg, len, "%s", err.text);
	}
	/* the same name again, now with everyone */
	EXPECT(store_barrier(st, "again", HANG_S, &err) == 0, "barrier again: %s", err.text);
	for (int i = 0; i < 20; i++)
		EXPECT(store_barrier(st, "loop", HANG_S, &err) == 0, "barrier loop: %s", err.text);
	char name[64];
	EXPECT(strcmp(store_rank_name(st, 1, name, sizeof(name)), "rank 1") != 0 &&
		   strncmp(name, "rank 1 (", 8) == 0,
	       "rank name '%s'", name);
out:
	free(v);
	store_close(st, 5);
	return rv;
}

/* Rank 0 serves a job A of 2 ranks and waits for its rank 1 (the parent does not wait for it);
 * a rank 1 of job B and a rank 1 that says the job has 3 ranks are refused. */
static int rank_foreign(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st = NULL;
	struct store_opts o = opts(j, rank == 2 ? 1 : rank, 2, rank == 1 ? "B" : "A", HANG_S);
	if (rank == 2)
		o.world_size = 3;
	struct dp_error err;
	if (store_open(&st, &o, &err) == 0) {
		snprintf(msg, len, "opened");
		store_close(st, 1);
	} else {
		ranks_msg(msg, len, &err);
	}
	return 0;
}

/* Ranks 0 and 1 of a job of 2 open; then rank 0 claims rank 1 again from a second client,
 * while the real rank 1 waits for it to be done (so it is still connected). */
static int rank_duplicate(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st = NULL, *dup = NULL;
	struct store_opts o = opts(j, rank, 2, "A", HANG_S);
	struct dp_error err;
	void *v = NULL;
	size_t n;
	int rv = 0;
	EXPECT(store_open(&st, &o, &err) == 0, "open: %s", err.text);
	if (rank == 0) {
		struct store_opts d = opts(j, 1, 2, "A", HANG_S);
		EXPECT(store_open(&dup, &d, &err) < 0, "a second rank 1 opened");
		snprintf(msg, len, "%s", err.text);
		EXPECT(store_set(st, "dup.done", "1", 1, &err) == 0, "set: %s", err.text);
	} else {
		EXPECT(store_get(st, "dup.done", &v, &n, HANG_S, &err) == 0, "get: %s", err.text);
		snprintf(msg, len, "opened");
	}
out:
	free(v);
	store_close(dup, 1);
	store_close(st, 5);
	return rv;
}

/* A job with a secret. Rank 1, once rank 0 listens, first plays strangers: a rank 1 with a
 * wrong secret, one with none, a program that speaks another protocol; each is refused (told
 * nothing about the job) and logged on rank 0's stderr, which rank 0 sends to the file in
 * j->arg. Then the real rank 1 joins, and the two meet at a barrier. */
#define SECRET "0123456789abcdef0123456789abcdef"
static int rank_secret(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st = NULL, *bad = NULL;
	struct store_opts o = opts(j, rank, 2, "4711.3", HANG_S);
	struct dp_error err;
	int rv = 0;
	o.secret = SECRET;
	if (rank == 0) {
		FILE *f = freopen((const char *)j->arg, "w", stderr);
		EXPECT(f, "cannot send stderr to %s", (const char *)j->arg);
		setvbuf(stderr, NULL, _IONBF, 0);
	} else {
		if (until_listening(j, msg, len) < 0)
			return -1;
		struct store_opts w = o;
		w.secret = "00000000000000000000000000000000";
		w.timeout_s = 5;
		EXPECT(store_open(&bad, &w, &err) < 0, "a wrong secret was let in");
		size_t at = (size_t)snprintf(msg, len, "wrong|%s", err.text);
		w.secret = NULL;
		EXPECT(store_open(&bad, &w, &err) < 0, "no secret was let in");
		at += (size_t)snprintf(msg + at, len - at, "\nnone|%s", err.text);
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_port = htons((uint16_t)j->port),
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		char buf[256];
		EXPECT(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0,
		       "cannot connect to rank 0");
		const char req[] = "GET / HTTP/1.0\r\n\r\n";
		ssize_t n = write(fd, req, sizeof(req) - 1), got = 0, r;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		while (n > 0 && poll(&p, 1, HANG_S * 1000) == 1 &&
		       (r = read(fd, buf + got, sizeof(buf) - 1 - (size_t)got)) > 0)
			got += r;
		buf[got] = 0;
		close(fd);
		snprintf(msg + at, len - at, "\nhttp|%zd bytes back", got);
	}
	EXPECT(store_open(&st, &o, &err) == 0, "open: %s", err.text);
	EXPECT(store_barrier(st, "met", HANG_S, &err) == 0, "barrier: %s", err.text);
out:
	store_close(st, 5);
	return rv;
}

/* The rendezvous verdict is rank 0's. Rank 0 waits 3 s for a job of 3 ranks; rank 1 arrives
 * with a timeout of its own of 0.2 s, which passes first; a process of another job claims rank
 * 2 and is refused; the real rank 2 never comes. Ranks 0 and 1 must both name rank 2 (not
 * rank 1 as dead when its own timer ran out, not the refused claimant as arrived). Ranks 1
 * and 2 start once rank 0 listens, so only rank 0's clock matters. */
static int rank_verdict(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st = NULL;
	struct store_opts o = opts(j, rank, 3, rank == 2 ? "other" : "J", rank == 0 ? 3 : 0.2);
	if (rank > 0 && until_listening(j, msg, len) < 0)
		return -1;
	double t0 = ranks_now();
	struct dp_error err;
	if (store_open(&st, &o, &err) == 0) {
		snprintf(msg, len, "opened");
		store_close(st, 1);
		return 0;
	}
	snprintf(msg, len, "%.2f|%s", ranks_now() - t0, err.text);
	return 0;
}

/* Rank 2 dies without goodbye; the others hear of it at once: their store connection becomes
 * readable (pushed, not found by a timeout: there is none in this scenario). */
static int rank_death(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	struct dp_error err;
	int rv = 0;
	if (open3(j, rank, &st, msg, len) < 0)
		return -1;
	if (rank == 2) {
		ranks_sleep(0.2);
		_exit(9);
	}
	double t0 = ranks_now();
	struct pollfd p = {.fd = store_fd(st), .events = POLLIN};
	EXPECT(poll(&p, 1, HANG_S * 1000) == 1, "the store's descriptor did not become readable");
	EXPECT(store_poll_abort(st, HANG_S, &err) == 1, "no abort");
	snprintf(msg, len, "%.2f|%s", ranks_now() - t0, err.text);
	EXPECT(store_set(st, "k", "v", 1, &err) < 0, "set after the abort worked");
out:
	store_close(st, 1);
	return rv;
}

/* A timeout episode. Rank 0 times out in collective #17 and reports it; rank 2 waits in a
 * collective too (it polls the store as comm_cpu does) and answers the store's roll call at
 * once, long before a timer of its own would fire; rank 1 is elsewhere in the program: it
 * reads the store but does not report. The verdict names rank 1 only. With `all`, rank 1
 * reports too: the verdict comes as soon as everyone has, without the grace. */
struct report_job {
	double grace;
	int all;
};

static int rank_report(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	const struct report_job *rj = j->arg;
	struct store *st;
	struct dp_error err;
	int rv = 0;
	if (open3(j, rank, &st, msg, len) < 0)
		return -1;
	double t0 = ranks_now();
	if (rank == 0) {
		store_report_timeout(st, 17, "allreduce", 2, 30, rj->grace, &err);
	} else if (rank == 2 || rj->all) {
		while (!store_rollcall(st) && ranks_now() - t0 < HANG_S)
			if (store_poll_abort(st, 0.05, &err) == 1)
				break;
		EXPECT(store_rollcall(st), "no roll call within %d s", HANG_S);
		store_report_timeout(st, 16, "broadcast", 0, 30, rj->grace, &err);
	} else {
		EXPECT(store_poll_abort(st, HANG_S, &err) == 1, "no verdict");
		EXPECT(store_rollcall(st), "the roll call did not reach rank 1");
	}
	snprintf(msg, len, "%.2f|%s", ranks_now() - t0, err.text);
out:
	store_close(st, 3);
	return rv;
}

/* Rank 1 aborts the job. */
static int rank_abort(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	struct dp_error err;
	int rv = 0;
	if (open3(j, rank, &st, msg, len) < 0)
		return -1;
	if (rank == 1) {
		store_abort(st, "rank 1: loss is nan");
		snprintf(msg, len, "aborted");
	} else {
		EXPECT(store_poll_abort(st, HANG_S, &err) == 1, "no abort");
		snprintf(msg, len, "%s", err.text);
	}
out:
	store_close(st, 3);
	return rv;
}

/* Rank 0 closes first; rank 2 still uses the store for a while before its goodbye. Rank 2
 * starts its 0.5 s only once it saw rank 0's "closing", set just before rank 0's close. */
static int rank_close(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	struct dp_error err;
	void *v = NULL;
	size_t n;
	int rv = 0;
	if (open3(j, rank, &st, msg, len) < 0)
		return -1;
	if (rank == 2) {
		EXPECT(store_get(st, "closing", &v, &n, HANG_S, &err) == 0, "get: %s", err.text);
		ranks_sleep(0.5);
		EXPECT(store_set(st, "late", "1", 1, &err) == 0, "set: %s", err.text);
		free(v);
		v = NULL;
		EXPECT(store_get(st, "late", &v, &n, HANG_S, &err) == 0, "get: %s", err.text);
		EXPECT(store_poll_abort(st, 0, &err) == 0, "an abort: %s", err.text);
	}
	double t0 = ranks_now();
	if (rank == 0)
		EXPECT(store_set(st, "closing", "1", 1, &err) == 0, "set: %s", err.text);
	store_close(st, HANG_S);
	st = NULL;
	snprintf(msg, len, "%.2f", ranks_now() - t0);
out:
	free(v);
	store_close(st, 1);
	return rv;
}

/* This process's TCP port on descriptor fd (peer: the other end's), or -1. */
static int fd_port(int fd, int peer)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);
	int r = peer ? getpeername(fd, (struct sockaddr *)&a, &l)
		     : getsockname(fd, (struct sockaddr *)&a, &l);
	return r == 0 && a.sin_family == AF_INET ? ntohs(a.sin_port) : -1;
}

/* A stop request (SIGTERM) set, as the trainer's signal thread does, at a point of the
 * rendezvous that the rank's sockets show, not after a time:
 * - connected: this rank's connection to the store is made. From there the rank sends its hello
 *   whatever happens, so the server will know it.
 * - other_hello: (rank 0) the server's end of another rank's connection has received bytes:
 *   that rank's hello is waiting to be read, so it is read before the server stops. */
struct stopper {
	int port, other_hello;
	atomic_int flag;
	pthread_t t;
};

static void *stopper_main(void *arg)
{
	struct stopper *s = arg;
	double t0 = ranks_now();
	while (ranks_now() - t0 < HANG_S) {
		int mine = -1; /* this rank's own end of its connection to the store */
		for (int fd = 3; fd < 1024; fd++)
			if (fd_port(fd, 1) == s->port)
				mine = fd_port(fd, 0);
		if (mine > 0 && !s->other_hello) {
			atomic_store(&s->flag, SIGTERM);
			return NULL;
		}
		for (int fd = 3; mine > 0 && fd < 1024; fd++) {
			struct tcp_info ti = {0};
			socklen_t l = sizeof(ti);
			int peer = fd_port(fd, 1);
			if (fd_port(fd, 0) != s->port || peer < 0 || peer == mine ||
			    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0)
				continue;
			if (ti.tcpi_bytes_received > 0) {
				atomic_store(&s->flag, SIGTERM);
				return NULL;
			}
		}
		ranks_sleep(0.001);
	}
	return NULL;
}

/* A stop request during the rendezvous, to rank 1 alone (arg NULL) or to rank 0 alone
 * (arg non-NULL): in a job of 3 whose rank 2 never comes, the rank asked and the other both
 * end the rendezvous as stopped (STORE_STOPPED), the other naming the rank asked, at once
 * instead of when the rendezvous closes (HANG_S). */
static int rank_stop(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	int asked = j->arg ? 0 : 1;
	struct store *st = NULL;
	struct store_opts o = opts(j, rank, 3, "S", HANG_S);
	struct stopper s = {.port = j->port, .other_hello = asked == 0};
	struct dp_error err;
	if (rank == 2)
		return 0;
	if (rank == 1 && until_listening(j, msg, len) < 0)
		return -1;
	o.stop = &s.flag;
	if (rank == asked && pthread_create(&s.t, NULL, stopper_main, &s) != 0) {
		snprintf(msg, len, "pthread_create failed");
		return -1;
	}
	double t0 = ranks_now();
	int rc = store_open(&st, &o, &err);
	if (rank == asked)
		pthread_join(s.t, NULL);
	snprintf(msg, len, "%d|%.2f|%s", rc, ranks_now() - t0, rc == 0 ? "opened" : err.text);
	store_close(st, 1);
	return 0;
}

/* Runs fn as the world ranks of a job, for up to a minute (a hang guard). */
static void run(int world, ranks_fn fn, const void *arg, int nowait, struct ranks_out *out)
{
	struct ranks_job j = {.world = world, .arg = arg};
	ranks_run(&j, fn, nowait, 2 * HANG_S, out);
}

int main(void)
{
	struct ranks_out out[RANKS_MAX];
	struct dp_error err;
	double t0 = ranks_now();

	{
		run(3, rank_kv, NULL, -1, out);
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
		/* someone else has the port: it listens there */
		struct sockaddr_in a = {.sin_family = AF_INET};
		socklen_t l = sizeof(a);
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0 ||
		    getsockname(fd, (struct sockaddr *)&a, &l) < 0)
			bail_out("cannot listen on a port for the test");
		struct ranks_job j = {.port = ntohs(a.sin_port)};
		struct store *st = NULL;
		struct store_opts o = opts(&j, 0, 2, "", 1);
		char port[32];
		ok(store_open(&st, &o, &err) < 0, "rank 0 cannot bind a port in use");
		snprintf(port, sizeof(port), "port %d", j.port);
		like(err.text, port, "the message names the port");
		like(err.text, "already in use", "the message says it is in use");
		note("%s", err.text);
		close(fd);
	}
	{
		/* nobody listens: the port is held (bound, not listening), so nobody else can */
		int held;
		struct ranks_job j = {.port = ranks_hold_port(&held)};
		struct store *st = NULL;
		struct store_opts o = opts(&j, 1, 2, "", 1);
		char where[64];
		double t = ranks_now();
		ok(store_open(&st, &o, &err) < 0, "no rank 0: open fails");
		t = ranks_now() - t;
		ok(t >= 1 && t < HANG_S, "after the timeout (%.2f s)", t);
		snprintf(where, sizeof(where), "127.0.0.1:%d", j.port);
		like(err.text, where, "the message names the master's address");
		like(err.text, "Connection refused", "and why");
		like(err.text, "rank 0 may not have started", "and what it may mean");
		note("%s", err.text);
		close(held);
	}
	{
		run(3, rank_foreign, NULL, 0, out);
		like(out[1].msg, "belongs to job 'B'", "a rank of another job is refused");
		like(out[1].msg, "serves job 'A'", "the message names both jobs");
		note("%s", out[1].msg);
		like(out[2].msg, "says the job has 3 ranks but rank 0 says 2",
		     "a rank with another world size is refused");
	}
	{
		char log[] = "/tmp/dptrain-store-test.XXXXXX";
		int lfd = mkstemp(log);
		if (lfd < 0)
			bail_out("mkstemp: cannot make a log file");
		close(lfd);
		struct ranks_job j = {.world = 2, .arg = log};
		ranks_run(&j, rank_secret, -1, 2 * HANG_S, out);
		ok(out[0].status == 0 && out[1].status == 0,
		   "with a secret: the ranks that have it meet (%s; %s)", out[0].msg, out[1].msg);
		like(out[1].msg, "wrong|rendezvous: the store at 127.0.0.1:",
		     "a rank 1 with a wrong secret is refused");
		like(out[1].msg, "refused rank 1: refused: not a rank of this job",
		     "it is told it is not one of the job's ranks");
		like(out[1].msg, "none|rendezvous: the store at",
		     "a rank 1 with no secret is refused");
		ok(!strstr(out[1].msg, "4711"),
		   "a refused connection learns nothing of the job (its id)");
		like(out[1].msg, "http|0 bytes back", "another protocol gets no answer at all");
		note("%s", out[1].msg);
		char text[4096] = "";
		FILE *f = fopen(log, "r");
		size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
		text[n] = 0;
		if (f)
			fclose(f);
		unlink(log);
		char want[128];
		snprintf(
		    want, sizeof(want),
		    "dptrain: rendezvous: refused a connection to port %d from 127.0.0.1:", j.port);
		like(text, want, "rank 0 logs each refused connection, with where it came from");
		like(text, "it said it was rank 1 on '", "the log says who it claimed to be");
		like(text, "but gave a wrong secret", "the log: a wrong secret");
		like(text, "but gave no secret", "the log: no secret");
		like(text, "it does not speak the dptrain store's protocol",
		     "the log: another protocol");
		ok(!strstr(text, SECRET), "the log does not hold the secret");
		note("%s", text);
	}
	{
		run(2, rank_duplicate, NULL, -1, out);
		ok(out[0].status == 0 && out[1].status == 0, "ranks 0 and 1 open (%s; %s)",
		   out[0].msg, out[1].msg);
		like(out[0].msg, "rank 1 is already connected", "a second rank 1 is refused");
		note("%s", out[0].msg);
	}
	{
		run(3, rank_verdict, NULL, -1, out);
		for (int r = 0; r < 2; r++) {
			like(out[r].msg,
			     "rendezvous: 1 of 3 ranks did not connect within 3 s: rank 2",
			     "rendezvous: rank %d names the rank that never arrived", r);
			ok(!strstr(out[r].msg, "rank 1"),
			   "rendezvous: rank %d does not name rank 1", r);
		}
		ok(atof(out[0].msg) >= 3, "rendezvous: rank 0 waited its 3 s (%.2f s)",
		   atof(out[0].msg));
		note("%s", out[1].msg);
		like(out[2].msg, "belongs to job 'other'", "rendezvous: the claimant is refused");
	}
	{
		run(3, rank_death, NULL, -1, out);
		for (int r = 0; r < 2; r++) {
			ok(out[r].status == 0, "a death: rank %d hears of it (%s)", r, out[r].msg);
			like(out[r].msg, "|rank 2 (", "a death: rank %d's message names it", r);
			like(out[r].msg, "died (its connection to the rendezvous store closed)",
			     "a death: rank %d is told what happened", r);
		}
		note("%s", out[0].msg);
	}
	{
		struct report_job rj = {.grace = 2};
		run(3, rank_report, &rj, -1, out);
		for (int r = 0; r < 3; r++) {
			ok(out[r].status == 0, "a timeout: rank %d (%s)", r, out[r].msg);
			like(out[r].msg, "|rank 1 (", "a timeout: rank %d's verdict names rank 1",
			     r);
			like(out[r].msg,
			     "stopped taking part: 2 of 3 ranks were waiting in a collective (rank "
			     "0 (",
			     "a timeout: rank %d's verdict counts rank 2, which answered the roll "
			     "call",
			     r);
			like(out[r].msg,
			     "timed out after 30 s in allreduce #17) and it did not answer",
			     "a timeout: rank %d's verdict says what happened", r);
		}
		ok(atof(out[0].msg) >= rj.grace, "the verdict waited the grace for rank 1 (%.2f s)",
		   atof(out[0].msg));
		note("%s", out[0].msg);
	}
	{
		struct report_job rj = {.grace = HANG_S, .all = 1};
		run(3, rank_report, &rj, -1, out);
		for (int r = 0; r < 3; r++)
			like(out[r].msg, "|all 3 ranks timed out after 30 s in allreduce #17",
			     "everyone reports: rank %d's verdict says none stopped", r);
		ok(atof(out[0].msg) < rj.grace,
		   "everyone reports: the verdict does not wait the grace (%.2f s)",
		   atof(out[0].msg));
	}
	{
		run(3, rank_abort, NULL, -1, out);
		is(out[0].msg, "rank 1: loss is nan", "an abort reaches rank 0");
		is(out[2].msg, "rank 1: loss is nan", "an abort reaches rank 2");
	}
	{
		run(3, rank_close, NULL, -1, out);
		if (!ok(out[2].status == 0, "a rank still uses the store after rank 0 closed it"))
			diag("%s", out[2].msg);
		ok(out[0].status == 0 && atof(out[0].msg) >= 0.5,
		   "rank 0's close waited for the others (%s s)", out[0].msg);
	}
	for (int asked = 1; asked >= 0; asked--) {
		int other = 1 - asked, code;
		char want[128];
		double took;
		run(3, rank_stop, asked ? NULL : "rank 0", -1, out);
		code = atoi(out[asked].msg);
		ok(code == STORE_STOPPED,
		   "a stop request to rank %d alone in the rendezvous: it "
		   "stops (%s)",
		   asked, out[asked].msg);
		like(out[asked].msg, "stopped on request while rank", "rank %d says why", asked);
		code = atoi(out[other].msg);
		took = atof(strchr(out[other].msg, '|') ? strchr(out[other].msg, '|') + 1 : "99");
		ok(code == STORE_STOPPED && took < HANG_S - 1,
		   "rank %d stops too, before the rendezvous closes (%s)", other, out[other].msg);
		snprintf(want, sizeof(want), "rank %d (", asked);
		like(out[other].msg, want, "rank %d names rank %d", other, asked);
		like(out[other].msg, "was asked to stop (SIGTERM) during the rendezvous",
		     "rank %d: as a stop, not a death", other);
	}
	diag("store tests took %.1f s", ranks_now() - t0);
	return done_testing();
}
