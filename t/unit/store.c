/* store.c — unit tests for the rendezvous store (store/store.c): set/get/add/barrier
 * between forked ranks on 127.0.0.1, the messages for a barrier timeout, a port in use, an
 * unreachable master, a foreign job and a duplicate rank, and the liveness verdicts (a rank that
 * never arrives, a rank that dies, a rank that does not answer a timeout's roll call, an abort, a
 * rank asked to stop during the rendezvous). Then strangers: the handshake as seen on the wire
 * (the secret in no byte), programs on MASTER_PORT that are not the job's store (another
 * version, no secret, a wrong proof), a rank of protocol 1, and floods (silent connections,
 * oversized frames, rank 0 out of descriptors) that must not cost rank 0 its memory, its
 * descriptors or a core, nor lock the ranks out. The parent kills whatever is left.
 *
 * No check depends on how fast the machine is: what must happen before something else is made
 * to by a key the other rank waits for, elapsed times are only checked against lower bounds
 * that a chain of such waits guarantees, and the upper bounds are hang guards far above what
 * the scenario takes. */
#define _GNU_SOURCE
#include "t/lib/ranks.h"
#include "store/store.h"
#include "t/lib/tap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received (glibc's lacks it) */
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
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
 * The handshake on the wire (store_wire.h, whose private constants are restated here: these
 * tests speak the protocol as an independent peer would). */

#define W_HELLO_V1    1	 /* protocol 1's hello: rank, world, job, host, the secret itself */
#define W_CHALLENGE   10 /* server -> rank: u32 version, blob nonce, u32 flags */
#define W_HELLO	      11
#define W_REPLY	      64 /* u32 status, blob data */
#define W_PROTO	      2
#define W_FLAG_SECRET 1u

/* A frame being built: u32 length, u8 type, u32 id, fields. */
struct wframe {
	unsigned char b[2048];
	size_t n;
};

static void w_u32(struct wframe *f, uint32_t v)
{
	uint32_t be = htonl(v);
	memcpy(f->b + f->n, &be, 4);
	f->n += 4;
}

static void w_blob(struct wframe *f, const void *p, size_t n)
{
	w_u32(f, (uint32_t)n);
	memcpy(f->b + f->n, p, n);
	f->n += n;
}

static void w_begin(struct wframe *f, int type, uint32_t id)
{
	f->n = 0;
	w_u32(f, 0);
	f->b[f->n++] = (unsigned char)type;
	w_u32(f, id);
}

static int w_send(int fd, struct wframe *f)
{
	uint32_t be = htonl((uint32_t)(f->n - 4));
	memcpy(f->b, &be, 4);
	return send(fd, f->b, f->n, MSG_NOSIGNAL) == (ssize_t)f->n ? 0 : -1;
}

/* Whether the secret, as its hex digits or as the 16 bytes they spell, is in p[0..n). */
static int holds_secret(const unsigned char *p, size_t n, const char *secret)
{
	unsigned char raw[16];
	for (int i = 0; i < 16; i++) {
		unsigned v;
		sscanf(secret + 2 * i, "%2x", &v);
		raw[i] = (unsigned char)v;
	}
	return memmem(p, n, secret, strlen(secret)) != NULL ||
	       memmem(p, n, raw, sizeof(raw)) != NULL;
}

/* A listening socket on j->port (held by ranks_run: bound with SO_REUSEADDR, not listening). */
static int listen_on(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int connect_to(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
		return fd;
	if (fd >= 0)
		close(fd);
	return -1;
}

/* Reads what fd sends into buf (up to cap) until it closes or HANG_S pass; returns the count.
 * With want > 0, returns as soon as that many bytes arrived. */
static size_t read_all(int fd, unsigned char *buf, size_t cap, size_t want)
{
	size_t got = 0;
	double t0 = ranks_now();
	while (got < cap && (!want || got < want) && ranks_now() - t0 < HANG_S) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 100) != 1)
			continue;
		ssize_t r = read(fd, buf + got, cap - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

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
 * wrong secret, one with none, a program that speaks another protocol, a rank of protocol 1
 * (whose hello held the secret); each is refused (told nothing about the job; protocol 1 which
 * versions met) and logged on rank 0's stderr, which rank 0 sends to the file in j->arg. Then
 * the real rank 1 joins, and the two meet at a barrier. */
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
		at += (size_t)snprintf(
		    msg + at, len - at, "\nhttp|%zd bytes back%s", got,
		    memmem(buf, (size_t)got, "4711", 4) ? ", the job's id among them" : "");
		/* protocol 1's hello: u32 rank, u32 world, str job, str host, str secret */
		struct wframe f;
		unsigned char back[1024];
		w_begin(&f, W_HELLO_V1, 1);
		w_u32(&f, 1);
		w_u32(&f, 2);
		w_blob(&f, "4711.3", 6);
		w_blob(&f, "old", 3);
		w_blob(&f, SECRET, strlen(SECRET));
		fd = connect_to(j->port);
		EXPECT(fd >= 0 && w_send(fd, &f) == 0, "cannot send a protocol 1 hello");
		size_t nb = read_all(fd, back, sizeof(back) - 1, 0);
		close(fd);
		back[nb] = 0;
		const char *why = memmem(back, nb, "refused:", 8);
		snprintf(msg + at, len - at, "\nv1|%.*s",
			 why ? (int)(back + nb - (const unsigned char *)why) : 0, why ? why : "");
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

/* A stop request already there when rank 1 connects (it came between two of the rendezvous'
 * steps, before the store's challenge): rank 1 still introduces itself and says it stops, so
 * rank 0 stops at once naming it, instead of waiting for rank 1 until the rendezvous closes. */
static int rank_stop_early(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st = NULL;
	struct store_opts o = opts(j, rank, 3, "S", HANG_S);
	atomic_int flag = rank == 1 ? SIGTERM : 0;
	struct dp_error err;
	if (rank == 2)
		return 0;
	if (rank == 1 && until_listening(j, msg, len) < 0)
		return -1;
	o.stop = &flag;
	double t0 = ranks_now();
	int rc = store_open(&st, &o, &err);
	snprintf(msg, len, "%d|%.2f|%s", rc, ranks_now() - t0, rc == 0 ? "opened" : err.text);
	store_close(st, 1);
	return 0;
}

/* A program on MASTER_PORT that speaks the protocol's first words but does not know the
 * secret (rank 0 here plays it; rank 1 is a real rank with the secret):
 * - FAKE_VERSION: a challenge of protocol 99 (another dptrain version);
 * - FAKE_NO_SECRET: a challenge that says the store has no secret;
 * - FAKE_BAD_PROOF: a challenge as the job's store sends it, then an OK to the hello whose
 *   proof is not the secret's.
 * The fake keeps every byte the rank sends: the secret must not be among them. */
enum fake { FAKE_VERSION, FAKE_NO_SECRET, FAKE_BAD_PROOF };

static int rank_fake(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	enum fake kind = *(const enum fake *)j->arg;
	int rv = 0;
	if (rank == 1) {
		struct store *st = NULL;
		struct store_opts o = opts(j, 1, 2, "fake", HANG_S);
		struct dp_error err;
		o.secret = SECRET;
		/* until the fake listens its port refuses connections, and the rank tries again:
		 * the fake's first connection is the rank's */
		if (store_open(&st, &o, &err) == 0) {
			snprintf(msg, len, "opened");
			store_close(st, 1);
			return -1;
		}
		ranks_msg(msg, len, &err);
		return 0;
	}
	int lfd = listen_on(j->port), fd = -1;
	unsigned char in[8192];
	size_t got = 0;
	struct wframe f;
	EXPECT(lfd >= 0, "the fake cannot listen on port %d", j->port);
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	EXPECT(poll(&p, 1, HANG_S * 1000) == 1, "no rank connected");
	fd = accept(lfd, NULL, NULL);
	EXPECT(fd >= 0, "accept failed");
	w_begin(&f, W_CHALLENGE, 0);
	w_u32(&f, kind == FAKE_VERSION ? 99 : W_PROTO);
	w_blob(&f, "0123456789abcdef", 16);
	w_u32(&f, kind == FAKE_NO_SECRET ? 0 : W_FLAG_SECRET);
	EXPECT(w_send(fd, &f) == 0, "cannot send the challenge");
	if (kind == FAKE_BAD_PROOF) {
		got = read_all(fd, in, sizeof(in), 9);
		uint32_t be, id;
		memcpy(&be, in, 4);
		if (got < 9 || ntohl(be) + 4 > sizeof(in))
			EXPECT(0, "the hello is not a frame");
		if (got < ntohl(be) + 4)
			got += read_all(fd, in + got, sizeof(in) - got, ntohl(be) + 4 - got);
		EXPECT(got >= ntohl(be) + 4 && in[4] == W_HELLO, "no hello (%zu bytes, type %d)",
		       got, in[4]);
		memcpy(&be, in + 5, 4);
		id = ntohl(be);
		struct wframe d = {0};
		w_u32(&d, 0);
		w_u32(&d, 30000); /* u64 open_timeout in ms, */
		w_u32(&d, 0);
		w_u32(&d, 30000); /* u64 open_left */
		w_blob(&d, "not the proof of this job's secret", 32);
		w_begin(&f, W_REPLY, id);
		w_u32(&f, 0); /* REPLY_OK */
		w_blob(&f, d.b, d.n);
		EXPECT(w_send(fd, &f) == 0, "cannot send the reply");
	}
	got += read_all(fd, in + got, sizeof(in) - got, 0); /* until the rank gives up */
	snprintf(msg, len, "%zu bytes from the rank, the secret %s", got,
		 holds_secret(in, got, SECRET) ? "among them" : "not among them");
out:
	if (fd >= 0)
		close(fd);
	if (lfd >= 0)
		close(lfd);
	return rv;
}

/* A relay between a rank and the real store that keeps every byte each way: what someone on
 * the path sees. */
struct relay {
	int lfd, port, to_port;
	unsigned char up[65536], down[65536]; /* rank -> store, store -> rank */
	size_t nup, ndown;
	pthread_t t;
};

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	struct pollfd p = {.fd = r->lfd, .events = POLLIN};
	if (poll(&p, 1, HANG_S * 1000) != 1)
		return NULL;
	int a = accept(r->lfd, NULL, NULL), b = connect_to(r->to_port);
	double t0 = ranks_now();
	while (a >= 0 && b >= 0 && ranks_now() - t0 < 3 * HANG_S) {
		struct pollfd q[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
		unsigned char buf[4096];
		if (poll(q, 2, 100) <= 0)
			continue;
		int from = q[0].revents ? 0 : 1;
		ssize_t n = read(from ? b : a, buf, sizeof(buf));
		if (n <= 0 || send(from ? a : b, buf, (size_t)n, MSG_NOSIGNAL) != n)
			break;
		unsigned char *keep = from ? r->down : r->up;
		size_t *nkeep = from ? &r->ndown : &r->nup;
		size_t k = (size_t)n < sizeof(r->up) - *nkeep ? (size_t)n : sizeof(r->up) - *nkeep;
		memcpy(keep + *nkeep, buf, k);
		*nkeep += k;
	}
	if (a >= 0)
		close(a);
	if (b >= 0)
		close(b);
	return NULL;
}

static int relay_start(struct relay *r, int to_port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	r->nup = r->ndown = 0;
	r->to_port = to_port;
	r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(r->lfd, 4) < 0 || getsockname(r->lfd, (struct sockaddr *)&a, &l) < 0)
		return -1;
	r->port = ntohs(a.sin_port);
	return pthread_create(&r->t, NULL, relay_main, r) == 0 ? 0 : -1;
}

static void relay_stop(struct relay *r)
{
	pthread_join(r->t, NULL);
	close(r->lfd);
}

/* A job with a secret, rank 1 through a relay that sees every byte: first a rank 1 with a
 * wrong secret (refused), then the real one (it joins, and the two meet at a barrier). The
 * secret is in no byte either way, nor the wrong one's in its hello. */
static int rank_wire(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	static struct relay r;
	struct store *st = NULL, *bad = NULL;
	struct store_opts o = opts(j, rank, 2, "wire", HANG_S);
	struct dp_error err;
	int rv = 0;
	o.secret = SECRET;
	if (rank == 1) {
		const char *wrong = "fedcba9876543210fedcba9876543210";
		if (until_listening(j, msg, len) < 0)
			return -1;
		struct store_opts w = o;
		w.secret = wrong;
		EXPECT(relay_start(&r, j->port) == 0, "cannot start the relay");
		w.master_port = r.port;
		EXPECT(store_open(&bad, &w, &err) < 0, "a wrong secret was let in");
		relay_stop(&r);
		size_t at = (size_t)snprintf(
		    msg, len, "wrong: %zu bytes up, %zu down, its secret %s, the job's %s|%s",
		    r.nup, r.ndown, holds_secret(r.up, r.nup, wrong) ? "sent" : "not sent",
		    holds_secret(r.down, r.ndown, SECRET) ? "sent" : "not sent", err.text);
		EXPECT(relay_start(&r, j->port) == 0, "cannot start the relay");
		o.master_port = r.port;
		EXPECT(store_open(&st, &o, &err) == 0, "open through the relay: %s", err.text);
		EXPECT(store_barrier(st, "met", HANG_S, &err) == 0, "barrier: %s", err.text);
		store_close(st, 5);
		st = NULL;
		relay_stop(&r);
		snprintf(msg + at, len - at, "\nright: %zu bytes up, %zu down, the secret %s",
			 r.nup, r.ndown,
			 holds_secret(r.up, r.nup, SECRET) || holds_secret(r.down, r.ndown, SECRET)
			     ? "sent"
			     : "not sent");
		return 0;
	}
	EXPECT(store_open(&st, &o, &err) == 0, "open: %s", err.text);
	EXPECT(store_barrier(st, "met", HANG_S, &err) == 0, "barrier: %s", err.text);
	snprintf(msg, len, "opened");
out:
	store_close(st, 5);
	return rv;
}

/* ---------------------------------------------------------------------------------------
 * Strangers in numbers. What rank 0 shows (its stderr, its memory and CPU time) and what the
 * ranks that flood it wait for pass through a page the forked ranks share. */

struct flood {
	atomic_int rank0_in;		/* rank 0's own connection was taken by its server */
	atomic_int flooded;		/* the strangers are connected */
	atomic_int measured;		/* rank 0 has measured what it wanted to during the flood */
	double cpu_s;			/* rank 0's CPU time during 2 s of the flood */
	long hwm_kb;			/* rank 0's peak memory: growth over the scenario */
	int strangers_reset, strangers; /* oversized frames: connections reset / made */
	size_t stranger_bytes;		/* oversized frames: what the strangers got sent */
	char log[128];			/* rank 0's stderr */
};

static struct flood *flood_shared(void)
{
	struct flood *f =
	    mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (f == MAP_FAILED)
		bail_out("mmap");
	memset(f, 0, sizeof(*f));
	return f;
}

/* This process's peak resident memory (VmHWM), in kB. */
static long hwm_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

static double cpu_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* Waits until the shared flag is set; 0, or -1 after HANG_S. */
static int wait_flag(atomic_int *flag)
{
	double t0 = ranks_now();
	while (!atomic_load(flag))
		if (ranks_now() - t0 > HANG_S)
			return -1;
		else
			ranks_sleep(0.01);
	return 0;
}

/* Rank 0's watcher: says when its own connection was taken by its server (its end has
 * received a byte: the challenge), so that strangers come after it; with `measure`, then
 * waits for the flood and measures this process's CPU time over 2 s of it. */
struct watcher {
	const struct ranks_job *j;
	struct flood *f;
	int measure;
	pthread_t t;
};

static void *watcher_main(void *arg)
{
	struct watcher *w = arg;
	double t0 = ranks_now();
	while (!atomic_load(&w->f->rank0_in) && ranks_now() - t0 < HANG_S) {
		for (int fd = 3; fd < 1024; fd++) {
			struct tcp_info ti = {0};
			socklen_t l = sizeof(ti);
			if (fd_port(fd, 1) == w->j->port && fd_port(fd, 0) != w->j->port &&
			    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0 &&
			    ti.tcpi_bytes_received > 0)
				atomic_store(&w->f->rank0_in, 1);
		}
		ranks_sleep(0.001);
	}
	if (!w->measure || wait_flag(&w->f->flooded) < 0)
		return NULL;
	double c0 = cpu_now();
	ranks_sleep(2);
	w->f->cpu_s = cpu_now() - c0;
	atomic_store(&w->f->measured, 1);
	return NULL;
}

/* Rank 0 of the flood scenarios: its descriptors limited to nofile, its stderr to the file
 * j->arg's log names, a watcher; it opens the store and reports its peak memory's growth. */
static int flood_rank0(const struct ranks_job *j, struct flood *f, rlim_t nofile, int measure,
		       const char *secret, char *msg, size_t len)
{
	struct store *st = NULL;
	struct store_opts o = opts(j, 0, j->world, "flood", HANG_S);
	struct rlimit rl = {nofile, nofile};
	struct watcher w = {.j = j, .f = f, .measure = measure};
	struct dp_error err;
	int rv = 0;
	o.secret = secret;
	EXPECT(freopen(f->log, "w", stderr), "cannot send stderr to %s", f->log);
	setvbuf(stderr, NULL, _IONBF, 0);
	EXPECT(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
	long hwm0 = hwm_kb();
	EXPECT(pthread_create(&w.t, NULL, watcher_main, &w) == 0, "pthread_create");
	int rc = store_open(&st, &o, &err);
	pthread_join(w.t, NULL);
	f->hwm_kb = hwm_kb() - hwm0;
	EXPECT(rc == 0, "open: %s", err.text);
	EXPECT(store_barrier(st, "after", HANG_S, &err) == 0, "barrier: %s", err.text);
	snprintf(msg, len, "opened");
out:
	store_close(st, 5);
	return rv;
}

/* The strangers: n connections to rank 0's port that say nothing (nonblocking connects, which
 * loopback completes into the listener's backlog). fds gets them. */
static int strangers_connect(const struct ranks_job *j, int *fds, int n, char *msg, size_t len)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)j->port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	for (int i = 0; i < n; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fds[i] < 0 || (connect(fds[i], (struct sockaddr *)&a, sizeof(a)) < 0 &&
				   errno != EINPROGRESS)) {
			snprintf(msg, len, "stranger %d cannot connect: %s", i, strerror(errno));
			return -1;
		}
	}
	return 0;
}

#define SILENT_N 500 /* silent strangers: several times rank 0's descriptors */

/* 500 strangers connect to rank 0's port and say nothing, while rank 0 has 128 descriptors;
 * then ranks 1 and 2 join (rank 1 holds the strangers open until it has). */
static int rank_silent(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct flood *f = (struct flood *)j->arg;
	static int fds[SILENT_N];
	struct store *st = NULL;
	struct store_opts o = opts(j, rank, 3, "flood", HANG_S);
	struct dp_error err;
	int rv = 0;
	if (rank == 0)
		return flood_rank0(j, f, 128, 0, SECRET, msg, len);
	o.secret = SECRET;
	EXPECT(wait_flag(&f->rank0_in) == 0, "rank 0 did not connect to its store");
	if (rank == 1) {
		if (strangers_connect(j, fds, SILENT_N, msg, len) < 0)
			return -1;
		atomic_store(&f->flooded, 1);
	}
	EXPECT(wait_flag(&f->flooded) == 0, "no flood");
	EXPECT(store_open(&st, &o, &err) == 0, "open: %s", err.text);
	EXPECT(store_barrier(st, "after", HANG_S, &err) == 0, "barrier: %s", err.text);
	snprintf(msg, len, "opened");
out:
	if (rank == 1)
		for (int i = 0; i < SILENT_N; i++)
			if (fds[i] > 0)
				close(fds[i]);
	store_close(st, 5);
	return rv;
}

#define BIG_N	  8	     /* strangers with oversized frames */
#define BIG_FRAME (16 << 20) /* what each announces: within FRAME_MAX, beyond a hello */

/* Eight strangers each announce a 16 MiB frame and send it as fast as rank 0 takes it, all at
 * once; then rank 1 joins. */
static int rank_oversized(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct flood *f = (struct flood *)j->arg;
	int fds[BIG_N];
	size_t sent[BIG_N] = {0};
	int done[BIG_N] = {0};
	struct store *st = NULL;
	struct store_opts o = opts(j, rank, 2, "flood", HANG_S);
	struct dp_error err;
	static char chunk[65536];
	int rv = 0;
	if (rank == 0)
		return flood_rank0(j, f, 1024, 0, SECRET, msg, len);
	o.secret = SECRET;
	EXPECT(wait_flag(&f->rank0_in) == 0, "rank 0 did not connect to its store");
	if (strangers_connect(j, fds, BIG_N, msg, len) < 0)
		return -1;
	f->strangers = BIG_N;
	memset(chunk, 'x', sizeof(chunk));
	double t0 = ranks_now();
	for (int left = BIG_N; left > 0 && ranks_now() - t0 < HANG_S;) {
		struct pollfd p[BIG_N];
		for (int i = 0; i < BIG_N; i++)
			p[i] = (struct pollfd){.fd = done[i] ? -1 : fds[i], .events = POLLOUT};
		poll(p, BIG_N, 100);
		for (int i = 0; i < BIG_N; i++) {
			if (done[i] || !p[i].revents)
				continue;
			size_t want = 4 + (size_t)BIG_FRAME - sent[i];
			if (sent[i] == 0) { /* the length first, then its body */
				uint32_t be = htonl(BIG_FRAME);
				memcpy(chunk, &be, 4);
			}
			ssize_t n = send(fds[i], chunk, want < sizeof(chunk) ? want : sizeof(chunk),
					 MSG_NOSIGNAL | MSG_DONTWAIT);
			memset(chunk, 'x', 4);
			if (n > 0)
				sent[i] += (size_t)n;
			if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
			    sent[i] == 4 + (size_t)BIG_FRAME) {
				f->strangers_reset += sent[i] < 4 + (size_t)BIG_FRAME;
				f->stranger_bytes += sent[i];
				done[i] = 1;
				left--;
			}
		}
	}
	for (int i = 0; i < BIG_N; i++)
		close(fds[i]);
	EXPECT(store_open(&st, &o, &err) == 0, "open: %s", err.text);
	EXPECT(store_barrier(st, "after", HANG_S, &err) == 0, "barrier: %s", err.text);
	snprintf(msg, len, "opened");
out:
	store_close(st, 5);
	return rv;
}

#define EMFILE_N 100 /* strangers, while rank 0 has 40 descriptors */

/* Rank 0, with 40 descriptors and no secret, is flooded by 100 silent strangers: its server
 * runs out of descriptors. Rank 0 measures its CPU time over 2 s of that; then the strangers
 * go and rank 1 joins. */
static int rank_emfile(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct flood *f = (struct flood *)j->arg;
	int fds[EMFILE_N];
	struct store *st = NULL;
	struct store_opts o = opts(j, rank, 2, "flood", HANG_S);
	struct dp_error err;
	int rv = 0;
	if (rank == 0)
		return flood_rank0(j, f, 40, 1, NULL, msg, len);
	EXPECT(wait_flag(&f->rank0_in) == 0, "rank 0 did not connect to its store");
	if (strangers_connect(j, fds, EMFILE_N, msg, len) < 0)
		return -1;
	atomic_store(&f->flooded, 1);
	int measured = wait_flag(&f->measured);
	for (int i = 0; i < EMFILE_N; i++)
		close(fds[i]);
	EXPECT(measured == 0, "rank 0 did not measure");
	EXPECT(store_open(&st, &o, &err) == 0, "open: %s", err.text);
	EXPECT(store_barrier(st, "after", HANG_S, &err) == 0, "barrier: %s", err.text);
	snprintf(msg, len, "opened");
out:
	store_close(st, 5);
	return rv;
}

/* Runs a flood scenario with a fresh shared page, its log in a temporary file; text gets the
 * log. */
static struct flood *run_flood(int world, ranks_fn fn, struct ranks_out *out, char *text,
			       size_t len)
{
	struct flood *f = flood_shared();
	snprintf(f->log, sizeof(f->log), "/tmp/dptrain-store-flood.XXXXXX");
	int lfd = mkstemp(f->log);
	if (lfd < 0)
		bail_out("mkstemp: cannot make a log file");
	close(lfd);
	struct ranks_job j = {.world = world, .arg = f};
	ranks_run(&j, fn, -1, 3 * HANG_S, out);
	FILE *l = fopen(f->log, "r");
	size_t n = l ? fread(text, 1, len - 1, l) : 0;
	text[n] = 0;
	if (l)
		fclose(l);
	unlink(f->log);
	return f;
}

/* How many lines of text hold needle. */
static int count_lines(const char *text, const char *needle)
{
	int n = 0;
	for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
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
		like(out[1].msg, "http|37 bytes back\n",
		     "another protocol gets nothing but the challenge (37 bytes: a version, a "
		     "nonce, a flag), nothing of the job");
		like(out[1].msg,
		     "v1|refused: this rank's dptrain speaks protocol 1, the store's (rank 0's) "
		     "speaks 2: every node must run the same dptrain version",
		     "a rank of protocol 1 is told which versions met");
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
		like(text, "it speaks protocol 1 of the store, not 2 (another dptrain)",
		     "the log: protocol 1");
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
	{
		run(3, rank_stop_early, NULL, -1, out);
		ok(atoi(out[1].msg) == STORE_STOPPED,
		   "a stop request before rank 1 connects: it stops (%s)", out[1].msg);
		double took = atof(strchr(out[0].msg, '|') ? strchr(out[0].msg, '|') + 1 : "99");
		ok(atoi(out[0].msg) == STORE_STOPPED && took < HANG_S - 1,
		   "rank 0 stops too, before the rendezvous closes (%s)", out[0].msg);
		like(out[0].msg, "rank 1 (vm) was asked to stop (SIGTERM) during the rendezvous",
		     "rank 0 names rank 1, as a stop");
	}
	{
		run(2, rank_wire, NULL, -1, out);
		ok(out[0].status == 0 && out[1].status == 0,
		   "through a relay that sees every byte: the rank with the secret joins (%s; %s)",
		   out[0].msg, out[1].msg);
		like(out[1].msg, "its secret not sent, the job's not sent|",
		     "a wrong secret is refused, and sent neither way");
		like(out[1].msg, "refused rank 1: refused: not a rank of this job",
		     "the rank with a wrong secret is told it is not one of the job's");
		like(out[1].msg, "\nright: ", "the rank with the secret joined through the relay");
		like(out[1].msg, "the secret not sent",
		     "the job's secret is in no byte either way");
		note("%s", out[1].msg);
	}
	for (int kind = FAKE_VERSION; kind <= FAKE_BAD_PROOF; kind++) {
		static const char *what[] = {"of protocol 99", "without a secret",
					     "whose proof is not the secret's"};
		enum fake k = (enum fake)kind;
		char want[256];
		struct ranks_job j = {.world = 2, .arg = &k};
		ranks_run(&j, rank_fake, -1, 2 * HANG_S, out);
		ok(out[1].status == 0, "a store %s: the rank refuses it (%s)", what[kind],
		   out[1].msg);
		like(out[0].msg, "the secret not among them",
		     "a store %s: the secret is in no byte the rank sent it", what[kind]);
		note("%s | %s", out[0].msg, out[1].msg);
		if (kind == FAKE_VERSION) {
			snprintf(want, sizeof(want),
				 "rendezvous: the store at 127.0.0.1:%d speaks protocol 99, this "
				 "rank's dptrain speaks 2: every node must run the same dptrain "
				 "version",
				 j.port);
			is(out[1].msg, want, "a store of another version: both versions named");
			like(out[0].msg, "0 bytes from the rank",
			     "a store of another version: the rank says nothing to it");
		} else if (kind == FAKE_NO_SECRET) {
			like(out[1].msg, "has no secret but rank 1 has the job's",
			     "a store without a secret: the rank says so");
			like(out[1].msg, "it is not this job's store",
			     "a store without a secret is not this job's");
		} else {
			like(out[1].msg,
			     "took rank 1's hello but could not prove that it knows "
			     "the job's secret: it is not this job's store",
			     "a store that cannot prove the secret is not this job's");
		}
	}
	{
		char text[8192];
		struct flood *f = run_flood(3, rank_silent, out, text, sizeof(text));
		for (int r = 0; r < 3; r++)
			ok(out[r].status == 0,
			   "%d silent strangers, rank 0 with 128 descriptors: rank %d joins (%s)",
			   SILENT_N, r, out[r].msg);
		like(text, "connections were waiting to send theirs (a flood? the oldest goes)",
		     "rank 0 logs the strangers it drops");
		ok(count_lines(text, "refused a connection") <= 20,
		   "as many refusals as it logs at most (%d)",
		   count_lines(text, "refused a connection"));
		ok(!strstr(text, "out of file descriptors"), "rank 0 never ran out of descriptors");
		ok(f->hwm_kb >= 0 && f->hwm_kb < 32768,
		   "silent strangers: rank 0's peak memory grew by %ld kB (< 32 MiB)", f->hwm_kb);
		note("%.300s", text);
		munmap(f, sizeof(*f));
	}
	{
		char text[8192];
		struct flood *f = run_flood(2, rank_oversized, out, text, sizeof(text));
		ok(out[0].status == 0 && out[1].status == 0,
		   "after %d strangers announced 16 MiB frames the ranks join (%s; %s)", BIG_N,
		   out[0].msg, out[1].msg);
		ok(f->strangers == BIG_N && f->strangers_reset == BIG_N,
		   "every one of them was cut off before its frame was sent (%d of %d; %zu MiB "
		   "sent in all)",
		   f->strangers_reset, f->strangers, f->stranger_bytes >> 20);
		ok(f->hwm_kb >= 0 && f->hwm_kb < 32768,
		   "rank 0's peak memory grew by %ld kB (< 32 MiB) while they sent %d MiB",
		   f->hwm_kb, BIG_N * (BIG_FRAME >> 20));
		like(text, "its first frame is 16777220 bytes, more than the 4096 a hello may be",
		     "rank 0 logs why");
		munmap(f, sizeof(*f));
	}
	{
		char text[8192];
		struct flood *f = run_flood(2, rank_emfile, out, text, sizeof(text));
		ok(out[0].status == 0 && out[1].status == 0,
		   "rank 0 out of descriptors: rank 1 joins once they come back (%s; %s)",
		   out[0].msg, out[1].msg);
		ok(f->cpu_s < 0.5,
		   "rank 0 out of descriptors does not spin: %.3f s of CPU time in 2 s (< 0.5)",
		   f->cpu_s);
		is_int(count_lines(text, "rank 0 is out of file descriptors"), 1,
		       "rank 0 says once that it ran out of descriptors");
		is_int(count_lines(text, "warning: no secret"), 1,
		       "without a secret rank 0 warns, once");
		like(text,
		     "accepts any program that can reach that port, as PyTorch's TCPStore does; "
		     "srun --dptrain and dptrain-run give the ranks a secret",
		     "the warning says what it means and what to do");
		note("%.600s", text);
		munmap(f, sizeof(*f));
	}
	diag("store tests took %.1f s", ranks_now() - t0);
	return done_testing();
}
