/* comm.c — unit tests for the CPU collective engine (trainer/dist/comm_cpu.c, comm_shm.c): every
 * operation for world sizes 1 to 5 against a direct computation in the engine's order, bitwise
 * equal on every rank and run, in each of its three shapes: every rank on this host (shared
 * memory), the TCP ring only (as DPTRAIN_COMM_SHM=0), and ranks on named "nodes" (shared memory
 * in each, the TCP ring between their leaders); the shared memory's bits must be the TCP ring's.
 * Then a rank that dies, stalls, or aborts mid-job, named on the others, in each shape.
 * Ranks are forked processes on 127.0.0.1; the parent waits with a deadline and kills leftovers.
 * No check depends on the machine's speed: a failure found by a timeout must take at least the
 * timeout, one found otherwise must take less than its (long) timeout, and the survivors'
 * verdict must not depend on whose timer fired first. */
#define _GNU_SOURCE
#include "trainer/dist/comm.h"
#include "common/hmac.h"
#include "t/lib/ranks.h"
#include "store/store.h"
#include "t/lib/tap.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum fault { FAULT_NONE, FAULT_DIES, FAULT_STOPS, FAULT_SLEEPS, FAULT_ABORTS };

/* The engine's shape: every rank on this host (one node: shared memory), every rank a node of
 * its own (the TCP ring: comm_cpu_opts.tcp_only), or rank r on node "n<r % nodes>" (shared
 * memory within, the TCP ring between the leaders). */
enum shape { SHAPE_HOST, SHAPE_TCP, SHAPE_NODES };

/* The rendezvous and collective timeout where none is meant to pass: a fault found without a
 * timeout (a death, an abort) must be found long before it, so it is set high enough that no
 * slow machine reaches it first. A stall is found by the timeout, kept short there so that the
 * test is quick. */
#define LONG_S 30

/* A scenario (the ranks' ranks_job.arg): the comm's timeout, and what it does to which rank. */
struct job {
	double timeout;
	int special; /* the rank the fault happens to; -1: none */
	enum fault fault;
	int slow; /* a rank whose own timeout is LONG_S: its timer fires late (0: none) */
	enum shape shape;
	int nodes;  /* SHAPE_NODES: how many */
	int shared; /* the allreduces run in the comm's shared buffer (shared_alloc) */
};

static const char *shape_name(const struct job *s)
{
	static char buf[64];
	if (s->shape == SHAPE_NODES) {
		snprintf(buf, sizeof(buf), "%d nodes", s->nodes);
		return buf;
	}
	return s->shape == SHAPE_TCP ? "TCP ring" : "shared memory";
}

/* The ring's size and this rank's node in the job's shape (SHAPE_HOST: one node, but the order
 * is the ring's of every rank, as SHAPE_TCP). */
static int ring_of(const struct job *s, int w)
{
	return s->shape == SHAPE_NODES ? (w < s->nodes ? w : s->nodes) : w;
}

static void opts_node(const struct job *s, int rank, struct comm_cpu_opts *co, char *name,
		      size_t len)
{
	co->tcp_only = s->shape == SHAPE_TCP;
	if (s->shape == SHAPE_NODES) {
		snprintf(name, len, "n%d", rank % s->nodes);
		co->node = name;
	}
}

/* The store every scenario's ranks meet in. */
static struct store_opts store_opts_of(const struct ranks_job *j, int rank)
{
	struct store_opts so = {.master_addr = "127.0.0.1",
				.master_port = j->port,
				.rank = rank,
				.world_size = j->world,
				.job = "comm-test",
				.secret = "comm-test-secret", /* the ring's hellos carry it */
				.timeout_s = LONG_S};
	return so;
}

static int open_all(const struct ranks_job *j, int rank, struct store **st, struct comm **c,
		    size_t chunk, char *msg, size_t len)
{
	const struct job *s = j->arg;
	struct store_opts so = store_opts_of(j, rank);
	struct comm_cpu_opts co = {.timeout_s = s->slow && rank == s->slow ? LONG_S : s->timeout,
				   .chunk_bytes = chunk};
	struct dp_error err;
	char node[32];
	opts_node(s, rank, &co, node, sizeof(node));
	*c = NULL;
	if (store_open(st, &so, &err) < 0)
		return ranks_msg(msg, len, &err);
	if (comm_cpu_create(c, *st, &co, &err) < 0) {
		store_close(*st, 1);
		return ranks_msg(msg, len, &err);
	}
	return 0;
}

static void close_all(struct store *st, struct comm *c, double timeout)
{
	if (c)
		c->ops->destroy(c);
	store_close(st, timeout);
}

/* ---------------------------------------------------------------------------------------
 * Every operation against a direct computation. */

/* Deterministic inputs in [-1, 1) with a spread of magnitudes, per rank, element and salt. */
static double gen(int rank, size_t i, int salt)
{
	uint64_t x = (uint64_t)rank * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull ^
		     (uint64_t)salt * 0x94d049bb133111ebull;
	x ^= x >> 31;
	x *= 0xd6e9b3a5c2f1e4b7ull;
	x ^= x >> 29;
	double u = (double)(x >> 11) / 9007199254740992.0;
	return (2 * u - 1) * (1 + (double)(x & 7));
}

/* Which allreduce block element i of count is in (see comm_cpu.c). */
static int block_of(size_t i, size_t count, int w)
{
	size_t base = count / (size_t)w, rem = count % (size_t)w;
	size_t big = rem * (base + 1);
	if (i < big)
		return (int)(i / (base + 1));
	return (int)(rem + (i - big) / base);
}

/* The shape of the job under test (the ranks' comm and the checks alike). */
static const struct job *shape;

/* What ring rank m adds: rank m's value, or on nodes node m's sum, its ranks ascending. */
static double node_f64(size_t i, int m, int w, int salt, double *dsum, double *mag)
{
	int nn = ring_of(shape, w);
	double s = 0;
	for (int r = m, first = 1; r < w; r += nn, first = 0) {
		double v = gen(r, i, salt);
		s = first ? v : s + v;
		*dsum += v;
		*mag += fabs(v);
	}
	return s;
}

static float node_f32(size_t i, int m, int w, int salt, double *dsum, double *mag)
{
	int nn = ring_of(shape, w);
	float s = 0;
	for (int r = m, first = 1; r < w; r += nn, first = 0) {
		float v = (float)gen(r, i, salt);
		s = first ? v : s + v;
		*dsum += v;
		*mag += fabs(v);
	}
	return s;
}

/* The ring's sum of block b: x[b+1] + x[b+2] + ... + x[b], in that order, over the ring's ranks
 * (on nodes: x[m] is node m's sum). */
static double want_f64(size_t i, int b, int w, int salt, int avg, double *dsum, double *mag)
{
	int nn = ring_of(shape, w);
	double s = 0;
	*dsum = *mag = 0;
	for (int k = 1; k <= nn; k++) {
		double v = node_f64(i, (b + k) % nn, w, salt, dsum, mag);
		s = k == 1 ? v : s + v;
	}
	return avg ? s / w : s;
}

static float want_f32(size_t i, int b, int w, int salt, int avg, double *dsum, double *mag)
{
	int nn = ring_of(shape, w);
	float s = 0;
	*dsum = *mag = 0;
	for (int k = 1; k <= nn; k++) {
		float v = node_f32(i, (b + k) % nn, w, salt, dsum, mag);
		s = k == 1 ? v : s + v;
	}
	return avg ? s / (float)w : s;
}

/* p[0..n) = this rank's inputs as type t. */
static void fill(void *p, size_t n, enum comm_dtype t, int rank, int salt)
{
	for (size_t i = 0; i < n; i++) {
		if (t == COMM_F64)
			((double *)p)[i] = gen(rank, i, salt);
		else
			((float *)p)[i] = (float)gen(rank, i, salt);
	}
}

struct check {
	char *msg;
	size_t len;
	int failed, n;
	uint64_t digest; /* over the results every rank must share */
};

static void check_fail(struct check *k, const char *what, size_t count, size_t i, double got,
		       double want)
{
	k->n++;
	if (k->failed++)
		return;
	snprintf(k->msg, k->len, "%s count %zu: element %zu is %.17g, want %.17g", what, count, i,
		 got, want);
}

static void digest(struct check *k, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		k->digest = (k->digest ^ b[i]) * 0x100000001b3ull;
}

static int comm_fail(struct check *k, const char *what, const struct dp_error *err)
{
	if (!k->failed++)
		snprintf(k->msg, k->len, "%s: %s", what, err->text);
	return -1;
}

/* The comm's shared buffer (shared_alloc; a node of several ranks), NULL where it has none. */
static unsigned char *shared_buf;
static size_t shared_cap;

/* Whether rank r of w has a shared buffer in the job's shape (a node of several ranks), and
 * whether any rank has. */
static int shared_here(const struct job *s, int w, int r)
{
	return s->shape == SHAPE_HOST ? w > 1
				      : s->shape == SHAPE_NODES && r % s->nodes + s->nodes < w;
}

static int shared_anywhere(const struct job *s, int w)
{
	return s->shape == SHAPE_HOST ? w > 1 : s->shape == SHAPE_NODES && w > s->nodes;
}

/* allreduce: elements in the ring's order bit for bit, near the exact sum, twice the same.
 * in_shared: buf is in the shared buffer (at an offset that moves with count), reduced in
 * place there; its bits must be those of the private buffer and of the engine's order. A rank
 * without a shared buffer (alone on its node) takes part with a private one. */
static int check_allreduce_in(struct comm *c, struct check *k, size_t count, enum comm_dtype t,
			      enum comm_redop op, int in_shared)
{
	int r = c->rank, w = c->world_size, avg = op == COMM_AVG, salt = 10 + 2 * t + avg;
	size_t es = comm_dtype_size(t), off = (count % 5) * es;
	char what[64];
	struct dp_error err;
	snprintf(what, sizeof(what), "allreduce%s %s %s", in_shared ? " (shared buffer)" : "",
		 avg ? "avg" : "sum", t == COMM_F64 ? "f64" : "f32");
	if (in_shared && shared_buf && off + count * es > shared_cap) {
		struct dp_error e;
		errprintf(&e, "%zu bytes at %zu past the shared buffer's %zu", count * es, off,
			  shared_cap);
		return comm_fail(k, what, &e);
	}
	int here = in_shared && shared_buf; /* else this rank's own, as the others' run */
	unsigned char *buf = here ? shared_buf + off : malloc(count * es + 1),
		      *again = malloc(count * es + 1);
	int rv = -1;
	fill(buf, count, t, r, salt);
	memcpy(again, buf, count * es);
	if (c->ops->allreduce(c, buf, count, t, op, &err) < 0 ||
	    c->ops->allreduce(c, again, count, t, op, &err) < 0) {
		comm_fail(k, what, &err);
		goto out;
	}
	for (size_t i = 0; i < count; i++) {
		double dsum, mag, got, want;
		int b = block_of(i, count, ring_of(shape, w));
		if (t == COMM_F64) {
			got = ((double *)buf)[i];
			want = want_f64(i, b, w, salt, avg, &dsum, &mag);
			if (got != want || fabs(got - dsum / (avg ? w : 1)) > 1e-14 * mag)
				check_fail(k, what, count, i, got, want);
		} else {
			float g = ((float *)buf)[i], wf = want_f32(i, b, w, salt, avg, &dsum, &mag);
			got = g;
			want = wf;
			if (memcmp(&g, &wf, 4) != 0 ||
			    fabs(got - dsum / (avg ? w : 1)) > 1e-6 * mag)
				check_fail(k, what, count, i, got, want);
		}
	}
	if (memcmp(buf, again, count * es) != 0)
		check_fail(k,
			   in_shared ? "allreduce in the shared buffer and in a private one"
				     : "allreduce run twice",
			   count, 0, 0, 0);
	if (!in_shared)
		digest(k, buf, count * es); /* the shapes' digests compare the same checks */
	k->n++;
	rv = 0;
out:
	if (!here)
		free(buf);
	free(again);
	return rv;
}

static int check_allreduce(struct comm *c, struct check *k, size_t count, enum comm_dtype t,
			   enum comm_redop op)
{
	return check_allreduce_in(c, k, count, t, op, 0);
}

static int check_reduce_scatter(struct comm *c, struct check *k, size_t count, enum comm_dtype t,
				enum comm_redop op, int in_place)
{
	int r = c->rank, w = c->world_size, avg = op == COMM_AVG, salt = 20 + 2 * t + avg;
	size_t es = comm_dtype_size(t), n = count * (size_t)w;
	char what[64];
	struct dp_error err;
	snprintf(what, sizeof(what), "reduce_scatter %s %s%s", avg ? "avg" : "sum",
		 t == COMM_F64 ? "f64" : "f32", in_place ? " in place" : "");
	unsigned char *in = malloc(n * es + 1), *out = malloc(count * es + 1);
	int rv = -1;
	fill(in, n, t, r, salt);
	unsigned char *dst = in_place ? in + (size_t)r * count * es : out;
	if (c->ops->reduce_scatter(c, in, dst, count, t, op, &err) < 0) {
		comm_fail(k, what, &err);
		goto out;
	}
	for (size_t j = 0; j < count; j++) {
		size_t i = (size_t)r * count + j;
		int b = r % ring_of(shape, w); /* its ring block: its node's */
		double dsum, mag, got, want;
		if (t == COMM_F64) {
			got = ((double *)dst)[j];
			want = want_f64(i, b, w, salt, avg, &dsum, &mag);
			if (got != want)
				check_fail(k, what, count, j, got, want);
		} else {
			float g = ((float *)dst)[j], wf = want_f32(i, b, w, salt, avg, &dsum, &mag);
			got = g;
			want = wf;
			if (memcmp(&g, &wf, 4) != 0)
				check_fail(k, what, count, j, got, want);
		}
	}
	k->n++;
	rv = 0;
out:
	free(in);
	free(out);
	return rv;
}

static int check_allgather(struct comm *c, struct check *k, size_t count, enum comm_dtype t,
			   int in_place)
{
	int r = c->rank, w = c->world_size, salt = 30 + t;
	size_t es = comm_dtype_size(t);
	char what[64];
	struct dp_error err;
	snprintf(what, sizeof(what), "allgather %s%s", t == COMM_F64 ? "f64" : "f32",
		 in_place ? " in place" : "");
	unsigned char *in = malloc(count * es + 1), *out = malloc(count * es * (size_t)w + 1);
	int rv = -1;
	unsigned char *src = in_place ? out + (size_t)r * count * es : in;
	fill(src, count, t, r, salt);
	if (c->ops->allgather(c, src, out, count, t, &err) < 0) {
		comm_fail(k, what, &err);
		goto out;
	}
	for (int q = 0; q < w; q++)
		for (size_t i = 0; i < count; i++) {
			double got, want = gen(q, i, salt);
			if (t == COMM_F64)
				got = ((double *)out)[(size_t)q * count + i];
			else
				got = ((float *)out)[(size_t)q * count + i], want = (float)want;
			if (got != want)
				check_fail(k, what, count, (size_t)q * count + i, got, want);
		}
	digest(k, out, count * es * (size_t)w);
	k->n++;
	rv = 0;
out:
	free(in);
	free(out);
	return rv;
}

static int check_broadcast(struct comm *c, struct check *k, size_t bytes, int root)
{
	char what[64];
	struct dp_error err;
	snprintf(what, sizeof(what), "broadcast from %d", root);
	unsigned char *buf = malloc(bytes + 1);
	int rv = -1;
	for (size_t i = 0; i < bytes; i++)
		buf[i] = c->rank == root ? (unsigned char)(gen(root, i, 40) * 100) : 0xee;
	if (c->ops->broadcast(c, buf, bytes, root, &err) < 0) {
		comm_fail(k, what, &err);
		goto out;
	}
	for (size_t i = 0; i < bytes; i++)
		if (buf[i] != (unsigned char)(gen(root, i, 40) * 100))
			check_fail(k, what, bytes, i, buf[i],
				   (unsigned char)(gen(root, i, 40) * 100));
	digest(k, buf, bytes);
	k->n++;
	rv = 0;
out:
	free(buf);
	return rv;
}

static int rank_ops(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	struct comm *c;
	struct check k = {.msg = msg, .len = len, .digest = 0xcbf29ce484222325ull};
	struct dp_error err;
	/* 12345 elements: every rank's block is more than one 4096-byte chunk; then around the
	 * shared memory's rounds (w slices of 4096 bytes: w * 1024 floats, w * 512 doubles), and
	 * past its depth of three slots */
	size_t per = (size_t)j->world * 1024;
	const size_t counts[] = {0, 1, 7, 12345, per - 1, per + 1, per / 2 + 1, 3 * per + 1};
	shape = j->arg;
	if (open_all(j, rank, &st, &c, 4096, msg, len) < 0)
		return -1;
	/* a shared buffer on a node of several ranks, none anywhere else */
	void *sh = NULL;
	shared_cap = ((3 * per + 1 > 12345 ? 3 * per + 1 : 12345) + 4) * sizeof(double);
	if (c->ops->shared_alloc(c, shared_cap, &sh, &err) < 0)
		comm_fail(&k, "shared_alloc", &err);
	else if ((sh != NULL) != shared_here(shape, j->world, rank))
		comm_fail(&k, "shared_alloc",
			  &(struct dp_error){"a shared buffer where none should be, or none "
					     "on a node of several ranks"});
	shared_buf = sh;
	for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]) && !k.failed; ci++) {
		size_t n = counts[ci];
		for (int t = COMM_F32; t <= COMM_F64; t++) {
			check_allreduce(c, &k, n, t, COMM_SUM);
			check_allreduce(c, &k, n, t, COMM_AVG);
			if (shared_anywhere(shape, j->world)) {
				check_allreduce_in(c, &k, n, t, COMM_SUM, 1);
				check_allreduce_in(c, &k, n, t, COMM_AVG, 1);
			}
			check_reduce_scatter(c, &k, n, t, COMM_SUM, 0);
			check_reduce_scatter(c, &k, n, t, COMM_AVG, 1);
			check_allgather(c, &k, n, t, 0);
			check_allgather(c, &k, n, t, 1);
		}
		for (int root = 0; root < j->world; root++)
			check_broadcast(c, &k, n * 4 + (n ? 3 : 0), root);
		if (c->ops->barrier(c, &err) < 0)
			comm_fail(&k, "barrier", &err);
		k.n++;
	}
	close_all(st, c, 10);
	if (!k.failed)
		snprintf(msg, len, "%d checks, digest %016llx", k.n, (unsigned long long)k.digest);
	return k.failed ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------
 * Strangers at a rank's ring port. Before its own comm, rank 0 connects to rank 1's ring port,
 * which rank 1 has published in the store: its connections are in rank 1's backlog before
 * rank 0's own. The stranger (a thread of rank 0) knows the handshake but not the secret
 * (kind 0: it answers the challenge with a MAC of another key), or speaks another protocol
 * (kind 1), or is STRANGERS_SILENT connections that say nothing (kind 2: once at a time, they
 * would keep rank 0 out for 5 s each, past the comm's timeout). Rank 1 must refuse them (they
 * get the challenge and nothing more) and take rank 0's real connection: the ring then works. */

#define STRANGERS_SILENT 12 /* within the ring port's backlog of 16 */

/* comm_cpu.c's handshake, as a stranger who knows it but not the secret speaks it */
#define RING_MAGIC 0x64707232u
#define RING_LABEL "dptrain ring hello v2"

struct stranger {
	int kind, world;
	int fd[STRANGERS_SILENT], n;
	pthread_t t;
	char what[256]; /* what each connection got back */
};

/* Reads what fd says until it closes (or LONG_S pass): the byte count, -1 if it stayed open. */
static long read_to_close(int fd, unsigned char *buf, size_t cap)
{
	long got = 0;
	double t0 = ranks_now();
	while (ranks_now() - t0 < LONG_S) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 100) != 1)
			continue;
		ssize_t r = read(fd, got < (long)cap ? buf + got : buf,
				 got < (long)cap ? cap - (size_t)got : cap);
		if (r <= 0)
			return got;
		got += r;
	}
	return -1;
}

static void *stranger_main(void *arg)
{
	struct stranger *s = arg;
	unsigned char buf[256];
	size_t at = 0;
	if (s->kind == 0) {
		/* the challenge, then an answer as rank 0's but for another key */
		long got = 0;
		while (got < 20) {
			struct pollfd p = {.fd = s->fd[0], .events = POLLIN};
			if (poll(&p, 1, LONG_S * 1000) != 1)
				break;
			ssize_t r = read(s->fd[0], buf + got, (size_t)(20 - got));
			if (r <= 0)
				break;
			got += r;
		}
		uint32_t head[4] = {htonl(RING_MAGIC), htonl(0), htonl((uint32_t)s->world),
				    htonl(1)};
		unsigned char answer[48];
		struct dp_hmac h;
		memcpy(answer, head, sizeof(head));
		dp_hmac_init(&h, "not-the-secret", 14);
		dp_hmac_update(&h, RING_LABEL, sizeof(RING_LABEL));
		dp_hmac_update(&h, buf + 4, 16);
		dp_hmac_update(&h, head + 1, 12);
		dp_hmac_final(&h, answer + 16);
		if (got == 20 &&
		    write(s->fd[0], answer, sizeof(answer)) == (ssize_t)sizeof(answer)) {
			long more = read_to_close(s->fd[0], buf, sizeof(buf));
			at += (size_t)snprintf(s->what, sizeof(s->what), "%ld", got + more);
		} else {
			snprintf(s->what, sizeof(s->what), "no challenge (%ld bytes)", got);
		}
		return NULL;
	}
	for (int i = 0; i < s->n && at < sizeof(s->what); i++)
		at += (size_t)snprintf(s->what + at, sizeof(s->what) - at, "%s%ld", i ? " " : "",
				       read_to_close(s->fd[i], buf, sizeof(buf)));
	return NULL;
}

static int stranger_start(const struct ranks_job *j, int kind, struct store *st, struct stranger *s,
			  char *msg, size_t len)
{
	struct sockaddr_in sa;
	char host[64];
	struct dp_error err;
	void *v = NULL;
	size_t n;
	int port;

	/* the first comm of a rank is generation 1 (comm_cpu.c's "created" counter) */
	if (store_get(st, "dptrain.comm.cpu.1.addr.1", &v, &n, LONG_S, &err) < 0 ||
	    sscanf(v, "%63[^:]:%d", host, &port) != 2) {
		snprintf(msg, len, "stranger: no ring address of rank 1: %s", err.text);
		free(v);
		return -1;
	}
	free(v);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, host, &sa.sin_addr);
	s->kind = kind;
	s->world = j->world;
	s->n = kind == 2 ? STRANGERS_SILENT : 1;
	for (int i = 0; i < s->n; i++) {
		s->fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s->fd[i] < 0 || connect(s->fd[i], (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			snprintf(msg, len, "stranger: cannot connect to %s:%d", host, port);
			return -1;
		}
	}
	if (kind == 1 && write(s->fd[0], "GET / HTTP/1.0\r\n\r\n", 18) != 18) {
		snprintf(msg, len, "stranger: cannot send");
		return -1;
	}
	if (pthread_create(&s->t, NULL, stranger_main, s) != 0) {
		snprintf(msg, len, "stranger: pthread_create failed");
		return -1;
	}
	return 0;
}

/* A relay between rank 0 and rank 1's ring port that keeps the first bytes each way: what
 * someone on the path sees of the handshake. */
struct relay {
	int lfd, a, b;
	unsigned char seen[2][4096];
	size_t nseen[2];
	pthread_t t;
};

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	struct pollfd p = {.fd = r->lfd, .events = POLLIN};
	if (poll(&p, 1, LONG_S * 1000) != 1 || (r->a = accept(r->lfd, NULL, NULL)) < 0)
		return NULL;
	for (;;) {
		struct pollfd q[2] = {{.fd = r->a, .events = POLLIN},
				      {.fd = r->b, .events = POLLIN}};
		unsigned char buf[65536];
		if (poll(q, 2, LONG_S * 1000) <= 0)
			break;
		int from = q[0].revents ? 0 : 1;
		ssize_t n = read(from ? r->b : r->a, buf, sizeof(buf));
		if (n <= 0 || send(from ? r->a : r->b, buf, (size_t)n, MSG_NOSIGNAL) != n)
			break;
		size_t k = sizeof(r->seen[0]) - r->nseen[from];
		k = (size_t)n < k ? (size_t)n : k;
		memcpy(r->seen[from] + r->nseen[from], buf, k);
		r->nseen[from] += k;
	}
	close(r->a);
	close(r->b);
	return NULL;
}

/* Rank 0 puts the relay between itself and rank 1's ring port: it connects to rank 1's, and
 * rank 1's address in the store becomes the relay's, which rank 0's comm then reads. */
static int relay_start(struct relay *r, struct store *st, char *msg, size_t len)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(sa);
	char host[64], me[64];
	struct dp_error err;
	void *v = NULL;
	size_t n;
	int port;
	if (store_get(st, "dptrain.comm.cpu.1.addr.1", &v, &n, LONG_S, &err) < 0 ||
	    sscanf(v, "%63[^:]:%d", host, &port) != 2) {
		snprintf(msg, len, "relay: no ring address of rank 1: %s", err.text);
		free(v);
		return -1;
	}
	free(v);
	r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(r->lfd, 4) < 0 || getsockname(r->lfd, (struct sockaddr *)&sa, &l) < 0) {
		snprintf(msg, len, "relay: cannot listen");
		return -1;
	}
	sa.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, host, &sa.sin_addr);
	r->b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r->b < 0 || connect(r->b, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		snprintf(msg, len, "relay: cannot connect to rank 1");
		return -1;
	}
	l = sizeof(sa);
	getsockname(r->lfd, (struct sockaddr *)&sa, &l);
	snprintf(me, sizeof(me), "127.0.0.1:%d", ntohs(sa.sin_port));
	if (store_set(st, "dptrain.comm.cpu.1.addr.1", me, strlen(me), &err) < 0 ||
	    pthread_create(&r->t, NULL, relay_main, r) != 0) {
		snprintf(msg, len, "relay: cannot start: %s", err.text);
		return -1;
	}
	return 0;
}

static int rank_stranger(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	const struct job *s = j->arg;
	struct store_opts so = store_opts_of(j, rank);
	struct comm_cpu_opts co = {.timeout_s = LONG_S, .chunk_bytes = 4096};
	struct check k = {.msg = msg, .len = len, .digest = 0xcbf29ce484222325ull};
	char node[32];
	struct store *st;
	struct comm *c = NULL;
	struct stranger sg = {0};
	static struct relay r;
	int started = 0, relayed = 0, rv = -1;
	struct dp_error err;

	shape = s;
	opts_node(s, rank, &co, node, sizeof(node));
	if (store_open(&st, &so, &err) < 0)
		return ranks_msg(msg, len, &err);
	if (rank == 0 && s->special == 3) {
		if (relay_start(&r, st, msg, len) < 0)
			goto out;
		relayed = 1;
	} else if (rank == 0) {
		if (stranger_start(j, s->special, st, &sg, msg, len) < 0)
			goto out;
		started = 1;
	}
	double t0 = ranks_now();
	if (comm_cpu_create(&c, st, &co, &err) < 0) {
		ranks_msg(msg, len, &err);
		goto out;
	}
	double took = ranks_now() - t0;
	check_allreduce(c, &k, 12345, COMM_F32, COMM_SUM);
	if (k.failed)
		goto out;
	snprintf(msg, len, "ring made in %.2f s, allreduce right", took);
	rv = 0;
out:
	if (started) {
		char made[256];
		pthread_join(sg.t, NULL);
		snprintf(made, sizeof(made), "%s", msg);
		if (rv == 0)
			snprintf(msg, len, "%s; the stranger got back: %s", made, sg.what);
		for (int i = 0; i < sg.n; i++)
			close(sg.fd[i]);
	}
	close_all(st, c, 10);
	if (relayed) {
		const char *secret = store_opts_of(j, 0).secret;
		pthread_join(r.t, NULL);
		close(r.lfd);
		int sent = memmem(r.seen[0], r.nseen[0], secret, strlen(secret)) ||
			   memmem(r.seen[1], r.nseen[1], secret, strlen(secret));
		if (rv == 0)
			snprintf(msg, len, "relayed %zu bytes up, %zu down: the secret %s",
				 r.nseen[0], r.nseen[1], sent ? "sent" : "not sent");
	}
	return rv;
}

/* ---------------------------------------------------------------------------------------
 * Failures. Survivors loop allreduce until it fails; msg gets "<seconds the failing call
 * took>|<its message>|<the message of the call after it>". */

/* The fault tests' buffers: in the comm's shared buffer (job.shared), else their own. */
static float *fault_shared;

static int survive(struct comm *c, size_t count, int iters, char *msg, size_t len)
{
	float *buf = fault_shared ? fault_shared : calloc(count, sizeof(float));
	struct dp_error err;
	int rv = -1;
	for (int it = 0; it < iters; it++) {
		double t0 = ranks_now();
		if (c->ops->allreduce(c, buf, count, COMM_F32, COMM_SUM, &err) < 0) {
			double t = ranks_now() - t0;
			struct dp_error again;
			c->ops->allreduce(c, buf, count, COMM_F32, COMM_SUM, &again);
			snprintf(msg, len, "%.2f|%s|%s", t, err.text, again.text);
			rv = 0;
			break;
		}
	}
	if (rv < 0)
		snprintf(msg, len, "no failure in %d allreduces", iters);
	if (buf != fault_shared)
		free(buf);
	return rv;
}

struct loop_arg {
	struct comm *c;
};

static void *loop_thread(void *p)
{
	struct loop_arg *a = p;
	float *buf = fault_shared ? fault_shared : calloc(1 << 18, sizeof(float));
	struct dp_error err;
	for (;;)
		if (a->c->ops->allreduce(a->c, buf, 1 << 18, COMM_F32, COMM_SUM, &err) < 0)
			break;
	if (buf != fault_shared)
		free(buf);
	return NULL;
}

/* A few small allreduces, so that the fault comes mid-job. */
static void allreduces(struct comm *c, int n)
{
	float x[16] = {0};
	struct dp_error err;
	for (int i = 0; i < n; i++)
		c->ops->allreduce(c, fault_shared ? fault_shared : x, 16, COMM_F32, COMM_SUM, &err);
}

/* The special rank does the job's fault; everyone else survive()s it. One that dies _exit()s
 * while its thread is in the middle of allreduces; one that stops stops whole (SIGSTOP: its store
 * thread too, if it is rank 0); one that sleeps leaves its store thread running; one that aborts
 * aborts the job after two allreduces and then, like everyone, finds its next call failing. */
static int rank_fault(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	const struct job *s = j->arg;
	struct store *st;
	struct comm *c;
	if (open_all(j, rank, &st, &c, 0, msg, len) < 0)
		return -1;
	if (s->shared) {
		void *sh = NULL;
		struct dp_error err;
		if (c->ops->shared_alloc(c, (1 << 18) * sizeof(float), &sh, &err) < 0 || !sh) {
			snprintf(msg, len, "no shared buffer: %s", sh ? "" : err.text);
			return -1;
		}
		fault_shared = sh;
	}
	if (rank == s->special) {
		switch (s->fault) {
		case FAULT_DIES: {
			struct loop_arg a = {c};
			pthread_t th;
			pthread_create(&th, NULL, loop_thread, &a);
			ranks_sleep(0.3);
			_exit(3);
		}
		case FAULT_STOPS:
		case FAULT_SLEEPS:
			allreduces(c, 3);
			if (s->fault == FAULT_SLEEPS)
				sleep(60);
			raise(SIGSTOP);
			_exit(0);
		case FAULT_ABORTS:
			allreduces(c, 2);
			c->ops->abort(c, "rank 1: loss is nan");
			break;
		case FAULT_NONE:
			break;
		}
	}
	int rv = survive(c, s->fault == FAULT_DIES ? 1 << 18 : 16, 100000, msg, len);
	close_all(st, c, s->fault == FAULT_STOPS || s->fault == FAULT_SLEEPS ? 0.5 : 1);
	return rv;
}

/* A fault and what every survivor's message must say about it. */
struct fault_case {
	const char *name;
	int world;
	int nowait; /* the rank not waited for (a stalled one); -1: none */
	struct job job;
	const char *want1, *want2, *want3;
	int timed_out; /* found by the survivors' timeout: no sooner than it; else long before */
};

/* what a survivor's verdict says when the other survivor answered the roll call */
#define WAITED	"2 of 3 ranks were waiting"
#define WAITED4 "3 of 4 ranks were waiting"

static const struct fault_case faults[] = {
    {"rank 2 dies", 4, -1, {LONG_S, 2, FAULT_DIES, 0, SHAPE_HOST, 0, 0}, "rank 2", "died", "", 0},
    {"rank 0 dies", 3, -1, {LONG_S, 0, FAULT_DIES, 0, SHAPE_HOST, 0, 0}, "rank 0", "died", "", 0},
    {"rank 1 stops",
     3,
     1,
     {1.5, 1, FAULT_STOPS, 0, SHAPE_HOST, 0, 0},
     "rank 1",
     "stopped taking part",
     WAITED,
     1},
    {"rank 1 stops, 2 is late",
     3,
     1,
     {1.5, 1, FAULT_STOPS, 2, SHAPE_HOST, 0, 0},
     "rank 1",
     "stopped",
     WAITED,
     1},
    {"rank 0 sleeps",
     3,
     0,
     {1.5, 0, FAULT_SLEEPS, 0, SHAPE_HOST, 0, 0},
     "rank 0",
     "stopped",
     WAITED,
     1},
    {"rank 0 stops",
     3,
     0,
     {1.5, 0, FAULT_STOPS, 0, SHAPE_HOST, 0, 0},
     "rank 0",
     "not responding",
     "",
     1},
    {"rank 1 aborts",
     3,
     -1,
     {LONG_S, 1, FAULT_ABORTS, 0, SHAPE_HOST, 0, 0},
     "loss is nan",
     "rank 1",
     "",
     0},
    /* the allreduces in the shared buffer, each rank's read and written by the others */
    {"shared buffer: rank 2 dies",
     4,
     -1,
     {LONG_S, 2, FAULT_DIES, 0, SHAPE_HOST, 0, 1},
     "rank 2",
     "died",
     "",
     0},
    {"shared buffer: rank 0 dies",
     3,
     -1,
     {LONG_S, 0, FAULT_DIES, 0, SHAPE_HOST, 0, 1},
     "rank 0",
     "died",
     "",
     0},
    {"shared buffer: rank 1 stops",
     3,
     1,
     {1.5, 1, FAULT_STOPS, 0, SHAPE_HOST, 0, 1},
     "rank 1",
     "stopped taking part",
     WAITED,
     1},
    /* the TCP ring alone (DPTRAIN_COMM_SHM=0), as before the shared memory */
    {"TCP ring: rank 2 dies",
     4,
     -1,
     {LONG_S, 2, FAULT_DIES, 0, SHAPE_TCP, 0, 0},
     "rank 2",
     "died",
     "",
     0},
    {"TCP ring: rank 1 stops",
     3,
     1,
     {1.5, 1, FAULT_STOPS, 0, SHAPE_TCP, 0, 0},
     "rank 1",
     "stopped taking part",
     WAITED,
     1},
    /* two nodes of two ranks (0 and 2, 1 and 3): a node's second rank, a node's leader */
    {"2 nodes: rank 3 dies",
     4,
     -1,
     {LONG_S, 3, FAULT_DIES, 0, SHAPE_NODES, 2, 0},
     "rank 3",
     "died",
     "",
     0},
    {"2 nodes: rank 1 stops",
     4,
     1,
     {1.5, 1, FAULT_STOPS, 0, SHAPE_NODES, 2, 0},
     "rank 1",
     "stopped taking part",
     WAITED4,
     1},
    {"2 nodes: rank 2 stops",
     4,
     2,
     {1.5, 2, FAULT_STOPS, 0, SHAPE_NODES, 2, 0},
     "rank 2",
     "stopped taking part",
     WAITED4,
     1},
    /* the same in the shared buffers: each node's summed into its leader's, copied back */
    {"2 nodes, shared buffer: rank 3 dies",
     4,
     -1,
     {LONG_S, 3, FAULT_DIES, 0, SHAPE_NODES, 2, 1},
     "rank 3",
     "died",
     "",
     0},
    {"2 nodes, shared buffer: rank 0 dies",
     4,
     -1,
     {LONG_S, 0, FAULT_DIES, 0, SHAPE_NODES, 2, 1},
     "rank 0",
     "died",
     "",
     0},
    {"2 nodes, shared buffer: rank 1 stops",
     4,
     1,
     {1.5, 1, FAULT_STOPS, 0, SHAPE_NODES, 2, 1},
     "rank 1",
     "stopped taking part",
     WAITED4,
     1},
    {"2 nodes, shared buffer: rank 2 stops",
     4,
     2,
     {1.5, 2, FAULT_STOPS, 0, SHAPE_NODES, 2, 1},
     "rank 2",
     "stopped taking part",
     WAITED4,
     1},
};

/* "<t>|<msg>|<again>": the failing call's seconds, message, and whether the next matched. */
static void check_failure(const struct fault_case *f, const struct ranks_out *out)
{
	const char *name = f->name;
	int special = f->job.special;
	for (int r = 0; r < f->world; r++) {
		if (r == special)
			continue;
		const char *m = out[r].msg;
		double t = atof(m);
		const char *bar = strchr(m, '|');
		const char *bar2 = bar ? strchr(bar + 1, '|') : NULL;
		char first[RANKS_MSG] = "";
		if (bar && bar2)
			snprintf(first, sizeof(first), "%.*s", (int)(bar2 - bar - 1), bar + 1);
		if (!ok(out[r].status == 0 && bar2, "%s: rank %d failed (exit %d)", name, r,
			out[r].status))
			diag("rank %d: %s", r, m);
		else if (r == (special + 1) % f->world)
			note("%s: rank %d: %s", name, r, first);
		like(first, f->want1, "%s: rank %d's message names it", name, r);
		like(first, f->want2, "%s: rank %d's message says what happened", name, r);
		if (*f->want3) /* the other survivor answered the roll call, whenever its timer */
			like(first, f->want3, "%s: rank %d's message names no survivor", name, r);
		if (f->job.slow && r == f->job.slow) /* the roll call, not its own timer */
			ok(t < LONG_S, "%s: rank %d failed before its own %d s timeout (%.2f s)",
			   name, r, LONG_S, t);
		else if (f->timed_out)
			ok(t >= f->job.timeout,
			   "%s: rank %d failed after the %.1f s timeout (%.2f s)", name, r,
			   f->job.timeout, t);
		else
			ok(t < f->job.timeout,
			   "%s: rank %d failed before the %.0f s timeout (%.2f s)", name, r,
			   f->job.timeout, t);
		ok(bar2 && strcmp(first, bar2 + 1) == 0, "%s: rank %d: the comm stays failed", name,
		   r);
	}
}

int main(void)
{
	struct ranks_out out[RANKS_MAX];
	double t0 = ranks_now();
	static const struct job shapes[] = {
	    {.timeout = LONG_S, .special = -1, .shape = SHAPE_HOST},
	    {.timeout = LONG_S, .special = -1, .shape = SHAPE_TCP},
	    {.timeout = LONG_S, .special = -1, .shape = SHAPE_NODES, .nodes = 2},
	    {.timeout = LONG_S, .special = -1, .shape = SHAPE_NODES, .nodes = 3},
	};
	char host_digest[6][RANKS_MSG];

	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const struct job *sh = &shapes[si];
		/* the TCP ring from 2 ranks; nodes where some node has two */
		int from = sh->shape == SHAPE_HOST ? 1 : sh->shape == SHAPE_TCP ? 2 : sh->nodes + 1;
		int to = sh->shape == SHAPE_NODES && sh->nodes == 3 ? 5 : sh->nodes ? 4 : 5;
		for (int w = from; w <= to; w++) {
			struct ranks_job j = {.world = w, .arg = sh};
			ranks_run(&j, rank_ops, -1, 60, out);
			int all = 1, same = 1;
			for (int r = 0; r < w; r++) {
				if (out[r].status != 0) {
					all = 0;
					diag("%s, world %d rank %d (exit %d): %s", shape_name(sh),
					     w, r, out[r].status, out[r].msg);
				}
				const char *d0 = strstr(out[0].msg, "digest"),
					   *d = strstr(out[r].msg, "digest");
				if (!d0 || !d || strcmp(d0, d) != 0)
					same = 0;
			}
			ok(all,
			   "%s, world %d: every operation on every rank matches the engine's order "
			   "(%s)",
			   shape_name(sh), w, out[0].msg);
			ok(same, "%s, world %d: every rank holds the same bits", shape_name(sh), w);
			const char *d = strstr(out[0].msg, "digest");
			if (sh->shape == SHAPE_HOST)
				snprintf(host_digest[w], sizeof(host_digest[w]), "%s", d ? d : "");
			else if (sh->shape == SHAPE_TCP)
				ok(d && strcmp(d, host_digest[w]) == 0,
				   "world %d: the TCP ring's bits are the shared memory's (%s, %s)",
				   w, d ? d : "none", host_digest[w]);
		}
	}

	for (int kind = 0; kind < 3; kind++) {
		static const char *what[] = {"an answer for another secret", "another protocol",
					     "12 silent connections"};
		static const char *told[] = {"the stranger got back: 20",
					     "the stranger got back: 20",
					     "the stranger got back: 20 20 20 20 20 20 20 20 20 20 "
					     "20 20"};
		struct job sj = {
		    .timeout = LONG_S, .special = kind, .fault = FAULT_NONE, .shape = SHAPE_TCP};
		struct ranks_job j = {.world = 2, .arg = &sj};
		ranks_run(&j, rank_stranger, -1, 3 * LONG_S, out);
		ok(out[0].status == 0 && out[1].status == 0,
		   "a stranger at rank 1's ring port (%s) is refused, the ring is made: %s | %s",
		   what[kind], out[0].msg, out[1].msg);
		like(out[0].msg, told[kind],
		     "the stranger (%s) got the challenge (20 bytes) and nothing more", what[kind]);
		/* heard one at a time, each stranger would cost 5 s: 12 of them, the timeout */
		const char *t = strstr(out[1].msg, "ring made in ");
		double took = t ? atof(t + strlen("ring made in ")) : LONG_S;
		ok(took < LONG_S / 2,
		   "the stranger (%s) did not hold up rank 1's ring: %.2f s (< %d, half the "
		   "timeout)",
		   what[kind], took, LONG_S / 2);
	}
	{
		struct job sj = {
		    .timeout = LONG_S, .special = 3, .fault = FAULT_NONE, .shape = SHAPE_TCP};
		struct ranks_job j = {.world = 2, .arg = &sj};
		ranks_run(&j, rank_stranger, -1, 3 * LONG_S, out);
		ok(out[0].status == 0 && out[1].status == 0,
		   "through a relay that sees every byte, the ring is made: %s | %s", out[0].msg,
		   out[1].msg);
		like(out[0].msg, "the secret not sent",
		     "the secret is in no byte of the ring's handshake, either way");
	}

	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
		const struct fault_case *f = &faults[i];
		struct ranks_job j = {.world = f->world, .arg = &f->job};
		ranks_run(&j, rank_fault, f->nowait, 3 * LONG_S, out);
		check_failure(f, out);
		if (f->job.fault == FAULT_ABORTS)
			like(out[f->job.special].msg, "aborted: rank 1: loss is nan",
			     "%s: its own comm fails", f->name);
	}
	diag("comm tests took %.1f s", ranks_now() - t0);
	return done_testing();
}
