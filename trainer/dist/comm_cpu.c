/* comm_cpu.c — the CPU collective engine of comm.h: which ranks share a node (from the store),
 * shared memory within a node (comm_shm.c), a TCP ring between the nodes (one leader each: its
 * lowest rank, which connects to the next node's leader and accepts the previous one's), the
 * ring algorithms, the hierarchical composition of the two, their fixed reduction order and the
 * failure path through the store. Owns its ring sockets and its node's group; not the store.
 *
 * Topology. Every rank publishes its host's identity (host name, boot id and network
 * namespace: the ranks that can share a memfd over an abstract Unix socket); rank 0 numbers the
 * nodes by their lowest rank and publishes every rank's node. Ranks alone on their node, or
 * every rank with DPTRAIN_COMM_SHM=0 (comm_cpu_opts.tcp_only), make the plain TCP ring of
 * all ranks, as before. One node: shared memory only. Several nodes: an operation reduces
 * within each node (all its ranks adding at once), runs the ring between the nodes' leaders,
 * and broadcasts within each node, as NCCL's and oneCCL's hierarchical algorithms do: a
 * gradient byte crosses the network as often as in a ring of the nodes alone.
 *
 * Reduction order. The ring splits the data into one block per ring rank; block b starts at
 * ring rank b + 1, which sends its part to the next, which adds its own, and so on round the
 * ring, so block b is ((x[b+1] + x[b+2]) + ...) + x[b] (ring ranks mod the ring's size),
 * summed once, on ring rank b, and copied to the others. On one node the shared memory adds
 * every element in exactly that order over the ranks (the same bits as the TCP ring); over
 * several nodes x[m] above is node m's sum, ((x[r0] + x[r1]) + ...) over its ranks in
 * ascending order. Every element is summed once, by one rank, and copied to the others: the
 * result is the same bit for bit on every rank and in every run. AVG divides that sum once by
 * world_size. allreduce's blocks are count / ring size elements, the first count % ring size
 * of them one more; reduce_scatter's are the ranks' blocks, over several nodes each node's
 * ranks' blocks together. */
#define _GNU_SOURCE
#include "trainer/dist/comm.h"
#include "trainer/dist/comm_shm.h"
#include "common/error.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/hmac.h"
#include "common/random.h"
#include "common/readfile.h"
#include "store/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CPU_CHUNK_DEFAULT (1u << 20)
#define CPU_MSG_MAX	  1024
/* After a peer's EOF, how long to wait for the store to name the dead rank. When the peer
 * died the verdict comes within milliseconds, but only once rank 0's store thread has run,
 * which a busy machine can delay; the wait runs out only when the ring connection alone
 * broke, so it may be as long as the store's own margin for a busy server. */
#define CPU_PEER_WAIT_S 5.0

struct comm_cpu {
	struct comm base; /* first: the struct comm * the caller holds */
	struct store *st;
	int next_fd, prev_fd, wake_fd;
	int next, prev; /* their ranks */
	int rr, rw;	/* this rank's place in the ring, the ring's size (the nodes) */

	/* the nodes: ranks node by node (each node's ascending), where each node's start */
	int nnodes, node, nlocal, local; /* this rank's node, its ranks, its index there */
	int *node_of, *local_of;	 /* per rank */
	int *packed, *first;		 /* world, nnodes + 1 */
	struct shm_group *g;		 /* this node's shared memory; NULL: alone on it */
	struct shm_group *gb;		 /* the buffers of shared_alloc; NULL: none */
	unsigned char *shared;
	size_t shared_bytes;
	long gen;
	struct shm_ctl ctl;
	size_t *boff, *blen; /* the ring's blocks of one operation (rw each) */
	struct comm_ops ops; /* cpu_ops, named for this comm ("cpu (...)") */
	char name[128];
	double timeout_s, grace_s;
	size_t chunk;
	unsigned long seq;
	const char *op; /* the operation in progress, for messages */

	unsigned char *scratch;
	size_t scratch_cap;
	unsigned char *ring; /* 2 chunks: what is received for a reduction passes through it */

	atomic_int aborted;
	pthread_mutex_t abort_lock;
	char abort_reason[CPU_MSG_MAX];

	struct comm_failure failure;
};

/* Poisons the comm: this and every later call fail with "<op>: <message>". */
static int cpu_fail(struct comm_cpu *c, struct dp_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int cpu_fail(struct comm_cpu *c, struct dp_error *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	comm_failv(&c->failure, c->op, err, fmt, ap);
	va_end(ap);
	return -1;
}

static int cpu_fail_abort(struct comm_cpu *c, struct dp_error *err)
{
	char reason[CPU_MSG_MAX];
	pthread_mutex_lock(&c->abort_lock);
	snprintf(reason, sizeof(reason), "%s", c->abort_reason);
	pthread_mutex_unlock(&c->abort_lock);
	return cpu_fail(c, err, "aborted: %s", reason);
}

static int cpu_scratch(struct comm_cpu *c, size_t bytes, struct dp_error *err)
{
	if (bytes <= c->scratch_cap)
		return 0;
	void *p = realloc(c->scratch, bytes);
	if (!p)
		return cpu_fail(c, err, "out of memory (%zu bytes of scratch)", bytes);
	c->scratch = p;
	c->scratch_cap = bytes;
	return 0;
}

/* dst = a + b, element by element (dst may be a or b). */
static void reduce_add(void *dst, const void *a, const void *b, size_t bytes, enum comm_dtype t)
{
	if (t == COMM_F64) {
		double *d = dst;
		const double *x = a, *y = b;
		for (size_t i = 0, n = bytes / 8; i < n; i++)
			d[i] = x[i] + y[i];
	} else {
		float *d = dst;
		const float *x = a, *y = b;
		for (size_t i = 0, n = bytes / 4; i < n; i++)
			d[i] = x[i] + y[i];
	}
}

static void scale_avg(void *buf, size_t count, enum comm_dtype t, int world)
{
	if (t == COMM_F64) {
		double *d = buf, w = (double)world;
		for (size_t i = 0; i < count; i++)
			d[i] /= w;
	} else {
		float *d = buf, w = (float)world;
		for (size_t i = 0; i < count; i++)
			d[i] /= w;
	}
}

/* ---------------------------------------------------------------------------------------
 * One ring step: send sbytes to the next rank while receiving rbytes from the previous one.
 * With dst, the bytes received go through c->ring and each chunk is reduced as it completes,
 * while still in cache: dst = received + own. With fwd, what is sent is what was received
 * (broadcast: sbuf == rbuf), as soon as it arrives. */

struct xfer {
	const unsigned char *sbuf;
	size_t sbytes, sdone;
	unsigned char *rbuf;
	size_t rbytes, rdone;
	int fwd;
	void *dst;
	const void *own;
	enum comm_dtype t;
	size_t reduced;
};

static void xfer_reduce(struct comm_cpu *c, struct xfer *x)
{
	if (!x->dst)
		return;
	size_t ready = x->rdone == x->rbytes ? x->rdone : x->rdone / c->chunk * c->chunk;
	while (x->reduced < ready) { /* chunk by chunk: none wraps round the ring */
		size_t n = ready - x->reduced < c->chunk ? ready - x->reduced : c->chunk;
		reduce_add((unsigned char *)x->dst + x->reduced,
			   c->ring + x->reduced % (2 * c->chunk),
			   (const unsigned char *)x->own + x->reduced, n, x->t);
		x->reduced += n;
	}
}

/* A ring neighbour's connection broke: the store's verdict names who died, if it has one. */
static int peer_lost(struct comm_cpu *c, int peer, int e, struct dp_error *err)
{
	char name[300];
	if (store_poll_abort(c->st, CPU_PEER_WAIT_S, err) == 1)
		return cpu_fail(c, err, "%s", err->text);
	store_rank_name(c->st, peer, name, sizeof(name));
	if (e)
		return cpu_fail(c, err, "%s closed the connection (%s)", name, strerror(e));
	return cpu_fail(c, err, "%s closed the connection", name);
}

/* This rank waits for waiting_for: its timeout passed, or another rank's did and the store
 * asks who else is waiting (the roll call). The store's verdict names who is not. */
static int cpu_report(struct comm_cpu *c, int waiting_for, struct dp_error *err)
{
	store_report_timeout(c->st, c->seq, c->op, waiting_for, c->timeout_s, c->grace_s, err);
	return cpu_fail(c, err, "%s", err->text);
}

static int xfer_run(struct comm_cpu *c, struct xfer *x, struct dp_error *err)
{
	double last = now_s();
	for (;;) {
		int progress = 0, want_out = 0, want_in = 0;
		if (atomic_load_explicit(&c->aborted, memory_order_acquire))
			return cpu_fail_abort(c, err);
		size_t slimit = x->fwd ? x->rdone : x->sbytes;
		if (x->sdone < slimit) {
			size_t n = slimit - x->sdone;
			ssize_t k = send(c->next_fd, x->sbuf + x->sdone,
					 n > c->chunk ? c->chunk : n, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (k > 0) {
				x->sdone += (size_t)k;
				progress = 1;
			} else if (k < 0 &&
				   (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
				want_out = 1;
			} else {
				return peer_lost(c, c->next, k < 0 ? errno : 0, err);
			}
		}
		if (x->rdone < x->rbytes) {
			size_t n = x->rbytes - x->rdone;
			unsigned char *to = x->rbuf + x->rdone;
			if (x->dst) { /* up to the ring's end; at most one chunk is not reduced */
				size_t at = x->rdone % (2 * c->chunk);
				to = c->ring + at;
				n = n < 2 * c->chunk - at ? n : 2 * c->chunk - at;
			}
			ssize_t k = recv(c->prev_fd, to, n > c->chunk ? c->chunk : n, MSG_DONTWAIT);
			if (k > 0) {
				x->rdone += (size_t)k;
				progress = 1;
				xfer_reduce(c, x);
			} else if (k < 0 &&
				   (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
				want_in = 1;
			} else {
				return peer_lost(c, c->prev, k < 0 ? errno : 0, err);
			}
		}
		if (x->sdone == x->sbytes && x->rdone == x->rbytes)
			break;
		if (progress) {
			last = now_s();
			continue;
		}
		if (x->fwd && x->sdone == x->rdone)
			want_in = 1; /* nothing to forward yet: wait for more */
		if (store_rollcall(c->st))
			return cpu_report(c, want_in ? c->prev : c->next, err);
		struct pollfd p[4];
		int np = 0;
		if (want_out)
			p[np++] = (struct pollfd){.fd = c->next_fd, .events = POLLOUT};
		if (want_in)
			p[np++] = (struct pollfd){.fd = c->prev_fd, .events = POLLIN};
		int st_at = np;
		p[np++] = (struct pollfd){.fd = store_fd(c->st), .events = POLLIN};
		int wake_at = np;
		p[np++] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
		double deadline = last + c->timeout_s;
		int n = poll(p, (nfds_t)np, ms_until(deadline));
		if (n < 0 && errno != EINTR)
			return cpu_fail(c, err, "poll: %s", strerror(errno));
		if (n > 0 && p[wake_at].revents)
			continue; /* the abort flag is checked at the top */
		if (n > 0 && p[st_at].revents) {
			if (store_poll_abort(c->st, 0, err) == 1)
				return cpu_fail(c, err, "%s", err->text);
			continue; /* a roll call is answered at the top */
		}
		if (n == 0 && now_s() >= deadline)
			return cpu_report(c, want_in ? c->prev : c->next, err);
	}
	xfer_reduce(c, x);
	return 0;
}

static int xfer(struct comm_cpu *c, const void *sbuf, size_t sbytes, void *rbuf, size_t rbytes,
		struct dp_error *err)
{
	struct xfer x = {.sbuf = sbuf, .sbytes = sbytes, .rbuf = rbuf, .rbytes = rbytes};
	return xfer_run(c, &x, err);
}

static int xfer_reduce_into(struct comm_cpu *c, const void *sbuf, size_t sbytes, size_t rbytes,
			    void *dst, const void *own, enum comm_dtype t, struct dp_error *err)
{
	struct xfer x = {
	    .sbuf = sbuf, .sbytes = sbytes, .rbytes = rbytes, .dst = dst, .own = own, .t = t};
	return xfer_run(c, &x, err);
}

/* ---------------------------------------------------------------------------------------
 * The ring's algorithms, between the ring's ranks (every rank, or the nodes' leaders). */

static int mod(int a, int w)
{
	return ((a % w) + w) % w;
}

/* Reduce-scatter over the ring's blocks (ring rank k's: bytes [off[k], off[k] + len[k]) of
 * b): at step s send block r-1-s, add block r-2-s; ring rank r ends with block r, divided by
 * div if div > 1. */
static int ring_reduce_blocks(struct comm_cpu *c, unsigned char *b, const size_t *off,
			      const size_t *len, enum comm_dtype t, int div, struct dp_error *err)
{
	int w = c->rw, r = c->rr;
	for (int s = 0; s < w - 1; s++) {
		int sb = mod(r - 1 - s, w), rb = mod(r - 2 - s, w);
		if (xfer_reduce_into(c, b + off[sb], len[sb], len[rb], b + off[rb], b + off[rb], t,
				     err) < 0)
			return -1;
	}
	if (div > 1)
		scale_avg(b + off[r], len[r] / comm_dtype_size(t), t, div);
	return 0;
}

/* All-gather over the ring's blocks: at step s send block r-s, receive block r-1-s. */
static int ring_gather_blocks(struct comm_cpu *c, unsigned char *b, const size_t *off,
			      const size_t *len, struct dp_error *err)
{
	int w = c->rw, r = c->rr;
	for (int s = 0; s < w - 1; s++) {
		int sb = mod(r - s, w), rb = mod(r - 1 - s, w);
		if (xfer(c, b + off[sb], len[sb], b + off[rb], len[rb], err) < 0)
			return -1;
	}
	return 0;
}

static int ring_allreduce(struct comm_cpu *c, void *buf, size_t count, enum comm_dtype t, int div,
			  struct dp_error *err)
{
	size_t es = comm_dtype_size(t), base_n = count / (size_t)c->rw, rem = count % (size_t)c->rw;
	for (int k = 0; k < c->rw; k++) {
		c->boff[k] = ((size_t)k * base_n + ((size_t)k < rem ? (size_t)k : rem)) * es;
		c->blen[k] = (base_n + ((size_t)k < rem)) * es;
	}
	if (ring_reduce_blocks(c, buf, c->boff, c->blen, t, div, err) < 0)
		return -1;
	return ring_gather_blocks(c, buf, c->boff, c->blen, err);
}

/* in: rw blocks of count; out: ring rank rr's, summed. */
static int ring_reduce_scatter(struct comm_cpu *c, const void *in, void *out, size_t count,
			       enum comm_dtype t, int div, struct dp_error *err)
{
	int w = c->rw, r = c->rr;
	size_t bytes = count * comm_dtype_size(t);
	const unsigned char *src = in;
	/* the partial sums go to two scratch blocks in turn (one is sent while the next one
	 * fills); the last step reduces into out (which may be in's block r: only it is read) */
	if (cpu_scratch(c, (size_t)(w > 3 ? 2 : w - 2) * bytes, err) < 0)
		return -1;
	const unsigned char *send = src + (size_t)mod(r - 1, w) * bytes;
	for (int s = 0; s < w - 1; s++) {
		int rb = mod(r - 2 - s, w);
		unsigned char *dst = s == w - 2 ? out : c->scratch + (size_t)(s % 2) * bytes;
		if (xfer_reduce_into(c, send, bytes, bytes, dst, src + (size_t)rb * bytes, t, err) <
		    0)
			return -1;
		send = dst;
	}
	if (div > 1)
		scale_avg(out, count, t, div);
	return 0;
}

/* bytes from ring rank root to every ring rank. */
static int ring_broadcast(struct comm_cpu *c, void *buf, size_t bytes, int root,
			  struct dp_error *err)
{
	int w = c->rw, d = mod(c->rr - root, w); /* distance from the root along the ring */
	if (d == 0)
		return xfer(c, buf, bytes, NULL, 0, err);
	if (d == w - 1)
		return xfer(c, NULL, 0, buf, bytes, err);
	struct xfer x = {.sbuf = buf, .sbytes = bytes, .rbuf = buf, .rbytes = bytes, .fwd = 1};
	return xfer_run(c, &x, err);
}

/* An all-gather of one byte: done when a byte from every ring rank went round. */
static int ring_barrier(struct comm_cpu *c, struct dp_error *err)
{
	int w = c->rw, r = c->rr;
	if (cpu_scratch(c, (size_t)w, err) < 0)
		return -1;
	memset(c->scratch, 1, (size_t)w);
	for (int s = 0; s < w - 1; s++)
		if (xfer(c, c->scratch + mod(r - s, w), 1, c->scratch + mod(r - 1 - s, w), 1, err) <
		    0)
			return -1;
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * The operations: the ring of every rank (no two share a node), shared memory (one node), or
 * both (several nodes: within each, then between them, then within each again). */

/* Common entry: the poison and abort checks, the op name, the sequence number. */
static int cpu_begin(struct comm_cpu *c, const char *op, struct dp_error *err)
{
	c->op = c->ctl.op = op;
	c->ctl.seq = ++c->seq;
	if (c->failure.failed)
		return errprintf(err, "%s", c->failure.msg.text);
	if (atomic_load_explicit(&c->aborted, memory_order_acquire))
		return cpu_fail_abort(c, err);
	return 0;
}

/* A shared-memory step's outcome, through the comm's failure path. */
static int shm_step(struct comm_cpu *c, int rv, struct dp_error *err)
{
	if (rv == SHM_ABORTED)
		return cpu_fail_abort(c, err);
	if (rv < 0)
		return cpu_fail(c, err, "%s", err->text);
	return 0;
}

/* Only the ring: no two ranks share a node. */
static int ring_only(const struct comm_cpu *c)
{
	return c->nnodes == c->base.world_size;
}

static int cpu_allreduce(struct comm *base, void *buf, size_t count, enum comm_dtype t,
			 enum comm_redop op, struct dp_error *err)
{
	struct comm_cpu *c = (struct comm_cpu *)base;
	int w = base->world_size, div = op == COMM_AVG ? w : 1;
	if (cpu_begin(c, "allreduce", err) < 0)
		return -1;
	if (w == 1 || count == 0)
		return 0;
	if (c->gb && (unsigned char *)buf >= c->shared &&
	    (unsigned char *)buf < c->shared + c->shared_bytes) {
		size_t off = (size_t)((unsigned char *)buf - c->shared);
		if (count > (c->shared_bytes - off) / comm_dtype_size(t))
			return cpu_fail(c, err,
					"%zu elements at byte %zu of the %zu-byte shared buffer "
					"run past its end",
					count, off, c->shared_bytes);
		if (c->nnodes == 1)
			return shm_step(
			    c, shm_reduce_shared(c->gb, off, count, t, div, SHM_ORDER_RING, 0, err),
			    err);
		/* the node's sum in its leader's buffer, the ring between the leaders on it, the
		 * others' copied from it: the slices' order (below), so the same bits */
		if (shm_step(
			c, shm_reduce_shared(c->gb, off, count, t, 1, SHM_ORDER_ASCENDING, 1, err),
			err) < 0)
			return -1;
		if (c->local == 0 && ring_allreduce(c, buf, count, t, div, err) < 0)
			return -1;
		return shm_step(c, shm_bcast_shared(c->gb, off, count * comm_dtype_size(t), err),
				err);
	}
	if (c->nnodes == 1)
		return shm_step(
		    c, shm_reduce(c->g, buf, buf, count, t, div, SHM_ORDER_RING, 0, err), err);
	if (c->g &&
	    shm_step(c, shm_reduce(c->g, buf, buf, count, t, 1, SHM_ORDER_ASCENDING, 1, err), err) <
		0)
		return -1;
	if (c->local == 0 && ring_allreduce(c, buf, count, t, div, err) < 0)
		return -1;
	if (c->g &&
	    shm_step(c, shm_bcast(c->g, buf, buf, count * comm_dtype_size(t), 0, err), err) < 0)
		return -1;
	return 0;
}

/* The ranks' blocks node by node: the ring's blocks are the nodes' (scratch holds them on
 * the leaders). */
static void node_blocks(struct comm_cpu *c, size_t bytes)
{
	for (int m = 0; m < c->nnodes; m++) {
		c->boff[m] = (size_t)c->first[m] * bytes;
		c->blen[m] = (size_t)(c->first[m + 1] - c->first[m]) * bytes;
	}
}

static int cpu_reduce_scatter(struct comm *base, const void *in, void *out, size_t count,
			      enum comm_dtype t, enum comm_redop op, struct dp_error *err)
{
	struct comm_cpu *c = (struct comm_cpu *)base;
	int w = base->world_size, div = op == COMM_AVG ? w : 1;
	size_t bytes = count * comm_dtype_size(t);
	const unsigned char *src = in;
	if (cpu_begin(c, "reduce_scatter", err) < 0)
		return -1;
	if (count == 0)
		return 0;
	if (w == 1) {
		memmove(out, in, bytes);
		return 0;
	}
	if (c->nnodes == 1)
		return shm_step(c, shm_reduce_scatter(c->g, in, out, count, t, div, err), err);
	if (ring_only(c))
		return ring_reduce_scatter(c, in, out, count, t, div, err);
	/* each rank's block summed within the node into the leader's scratch, node by node;
	 * the ring's reduce-scatter of the nodes' blocks; each block to its rank */
	int lead = c->local == 0;
	if (lead && cpu_scratch(c, (size_t)w * bytes, err) < 0)
		return -1;
	for (int p = 0; p < w; p++) {
		const unsigned char *mine = src + (size_t)c->packed[p] * bytes;
		unsigned char *to = lead ? c->scratch + (size_t)p * bytes : NULL;
		if (!c->g)
			memcpy(to, mine, bytes);
		else if (shm_step(
			     c,
			     shm_reduce(c->g, mine, to, count, t, 1, SHM_ORDER_ASCENDING, 1, err),
			     err) < 0)
			return -1;
	}
	node_blocks(c, bytes);
	if (lead && ring_reduce_blocks(c, c->scratch, c->boff, c->blen, t, div, err) < 0)
		return -1;
	unsigned char *ours = lead ? c->scratch + (size_t)c->first[c->node] * bytes : NULL;
	for (int j = 1; j < c->nlocal; j++)
		if (shm_step(c,
			     shm_bcast(c->g, lead ? ours + (size_t)j * bytes : NULL,
				       c->local == j ? out : NULL, bytes, 0, err),
			     err) < 0)
			return -1;
	if (lead)
		memcpy(out, ours, bytes);
	return 0;
}

static int cpu_allgather(struct comm *base, const void *in, void *out, size_t count,
			 enum comm_dtype t, struct dp_error *err)
{
	struct comm_cpu *c = (struct comm_cpu *)base;
	int w = base->world_size, r = base->rank;
	size_t bytes = count * comm_dtype_size(t);
	unsigned char *o = out;
	if (cpu_begin(c, "allgather", err) < 0)
		return -1;
	if (count == 0)
		return 0;
	if (w == 1) {
		if (in != out)
			memmove(out, in, bytes);
		return 0;
	}
	if (c->nnodes == 1)
		return shm_step(c, shm_allgather(c->g, in, out, count, t, err), err);
	if (ring_only(c)) {
		if (in != o + (size_t)r * bytes)
			memmove(o + (size_t)r * bytes, in, bytes);
		for (int k = 0; k < w; k++) {
			c->boff[k] = (size_t)k * bytes;
			c->blen[k] = bytes;
		}
		return ring_gather_blocks(c, o, c->boff, c->blen, err);
	}
	/* the node's blocks to its leader's scratch, node by node; the ring's all-gather of the
	 * nodes' blocks; the leader puts them in rank order and broadcasts them in the node */
	int lead = c->local == 0;
	if (lead && cpu_scratch(c, (size_t)w * bytes, err) < 0)
		return -1;
	unsigned char *ours = lead ? c->scratch + (size_t)c->first[c->node] * bytes : NULL;
	if (lead)
		memcpy(ours, in, bytes);
	for (int j = 1; j < c->nlocal; j++)
		if (shm_step(
			c,
			shm_bcast(c->g, in, lead ? ours + (size_t)j * bytes : NULL, bytes, j, err),
			err) < 0)
			return -1;
	node_blocks(c, bytes);
	if (lead) {
		if (ring_gather_blocks(c, c->scratch, c->boff, c->blen, err) < 0)
			return -1;
		for (int p = 0; p < w; p++)
			memcpy(o + (size_t)c->packed[p] * bytes, c->scratch + (size_t)p * bytes,
			       bytes);
	}
	if (c->g && shm_step(c, shm_bcast(c->g, o, o, (size_t)w * bytes, 0, err), err) < 0)
		return -1;
	return 0;
}

static int cpu_broadcast(struct comm *base, void *buf, size_t bytes, int root, struct dp_error *err)
{
	struct comm_cpu *c = (struct comm_cpu *)base;
	int w = base->world_size;
	if (cpu_begin(c, "broadcast", err) < 0)
		return -1;
	if (root < 0 || root >= w)
		return cpu_fail(c, err, "root %d is not a rank (0-%d)", root, w - 1);
	if (w == 1 || bytes == 0)
		return 0;
	int home = c->node_of[root], at = c->local_of[root];
	if (c->nnodes == 1)
		return shm_step(c, shm_bcast(c->g, buf, buf, bytes, at, err), err);
	/* within the root's node (its leader included), round the leaders, within the others */
	if (c->node == home && c->g &&
	    shm_step(c, shm_bcast(c->g, buf, buf, bytes, at, err), err) < 0)
		return -1;
	if (c->local == 0 && ring_broadcast(c, buf, bytes, home, err) < 0)
		return -1;
	if (c->node != home && c->g &&
	    shm_step(c, shm_bcast(c->g, buf, buf, bytes, 0, err), err) < 0)
		return -1;
	return 0;
}

static int cpu_barrier(struct comm *base, struct dp_error *err)
{
	struct comm_cpu *c = (struct comm_cpu *)base;
	if (cpu_begin(c, "barrier", err) < 0)
		return -1;
	if (base->world_size == 1)
		return 0;
	if (c->g && shm_step(c, shm_barrier(c->g, err), err) < 0)
		return -1;
	if (c->local == 0 && c->rw > 1 && ring_barrier(c, err) < 0)
		return -1;
	if (c->g && c->nnodes > 1 && shm_step(c, shm_barrier(c->g, err), err) < 0)
		return -1;
	return 0;
}

/* A node of several ranks: a buffer group of its own (comm_shm.h), made like the node's
 * segment (the leader makes it, the others attach after the handshake). A rank alone on its
 * node, the TCP ring only, and a second time: none. */
static int cpu_shared_alloc(struct comm *base, size_t bytes, void **buf, struct dp_error *err)
{
	struct comm_cpu *c = (struct comm_cpu *)base;
	*buf = NULL;
	if (cpu_begin(c, "shared_alloc", err) < 0)
		return -1;
	if (!c->g || c->gb || bytes == 0)
		return 0;
	struct shm_node nd = {.world = base->world_size,
			      .nlocal = c->nlocal,
			      .local = c->local,
			      .ranks = c->packed + c->first[c->node],
			      .node = c->node,
			      .gen = c->gen,
			      .user_bytes = bytes};
	struct shm_group *gb;
	if (shm_create(&gb, &c->ctl, &nd, err) < 0)
		return cpu_fail(c, err, "%s", err->text);
	c->shared = shm_buffer(gb);
	c->shared_bytes = bytes;
	c->gb = gb;
	*buf = c->shared;
	return 0;
}

static void cpu_abort(struct comm *base, const char *reason)
{
	struct comm_cpu *c = (struct comm_cpu *)base;
	pthread_mutex_lock(&c->abort_lock);
	int first = !atomic_load(&c->aborted);
	if (first) {
		snprintf(c->abort_reason, sizeof(c->abort_reason), "%s", reason);
		atomic_store_explicit(&c->aborted, 1, memory_order_release);
	}
	pthread_mutex_unlock(&c->abort_lock);
	if (!first)
		return;
	uint64_t one = 1;
	if (write(c->wake_fd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: it is readable anyway */
	}
	shm_wake(c->g);
	shm_wake(c->gb);
	store_abort(c->st, reason);
}

static void cpu_destroy(struct comm *base)
{
	struct comm_cpu *c = (struct comm_cpu *)base;
	if (!c)
		return;
	if (c->next_fd >= 0)
		close(c->next_fd);
	if (c->prev_fd >= 0)
		close(c->prev_fd);
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	shm_destroy(c->gb);
	shm_destroy(c->g);
	pthread_mutex_destroy(&c->abort_lock);
	free(c->node_of);
	free(c->local_of);
	free(c->packed);
	free(c->first);
	free(c->boff);
	free(c->blen);
	free(c->scratch);
	free(c->ring);
	free(c);
}

static const struct comm_ops cpu_ops = {
    .name = "cpu",
    .allreduce = cpu_allreduce,
    .reduce_scatter = cpu_reduce_scatter,
    .allgather = cpu_allgather,
    .broadcast = cpu_broadcast,
    .barrier = cpu_barrier,
    .shared_alloc = cpu_shared_alloc,
    .abort = cpu_abort,
    .destroy = cpu_destroy,
};

/* ---------------------------------------------------------------------------------------
 * Building the ring. */

/* No SO_SNDBUF/SO_RCVBUF: setting them turns off the kernel's buffer autotuning, which grows
 * them as the path needs, up to the maximum of net.ipv4.tcp_wmem and tcp_rmem; fixed 0.5 to
 * 4 MiB buffers measured 5-20% slower on loopback (allreduce-bench, 44.8 MB). */
static void sock_tune(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Parses "addr:port" ("[v6]:port") into a socket address. */
static int parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon = strrchr(s, ':');
	if (!colon || (size_t)(colon - s) >= sizeof(host))
		return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	char *h = host;
	if (*h == '[') {
		h++;
		h[strcspn(h, "]")] = 0;
	}
	int port = atoi(colon + 1);
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, h, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
		*len = sizeof(*a4);
		return 0;
	}
	if (inet_pton(AF_INET6, h, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*a6);
		return 0;
	}
	return -1;
}

/* The ring's handshake. The accepting rank sends a challenge (RING_MAGIC, RING_NONCE random
 * bytes); the connecting rank answers (RING_MAGIC, its rank, the world size, the comm's
 * generation, HMAC-SHA256(secret, RING_LABEL || nonce || rank || world || generation)); the
 * accepting rank checks the answer in constant time and says that it took the connection
 * (RING_MAGIC), so that a connecting rank whose connection was dropped before that, to make
 * room (RING_PENDING), connects again. The secret never crosses the wire, and an answer seen
 * once is worth nothing for another nonce.
 * One way is enough: the connecting rank reaches the port its neighbour published through the
 * store, whose answers it has authenticated (store_open's handshake is mutual), and that port
 * was bound before it was published, so no stranger can be listening there instead; only the
 * accepting rank has to learn who connected. Without a secret the key is empty, and the answer
 * still says which rank of which comm connects. */
#define RING_MAGIC     0x64707232u /* "dpr2": the ring's second handshake */
#define RING_NONCE     16
#define RING_CHALLENGE (4 + RING_NONCE)
#define RING_ANSWER    (16 + DP_SHA256_LEN)
#define RING_LABEL     "dptrain ring hello v2"
/* Connections to a rank's ring port are heard all at once, each for at most RING_HELLO_S, and
 * at most RING_PENDING of them: a new one beyond that drops the oldest, once that one has had
 * RING_GRACE_S to answer (until then new ones wait in the backlog). So strangers that connect
 * and say nothing, over and over, cannot keep the neighbour out, and delay its answer by
 * RING_GRACE_S at most, instead of RING_HELLO_S each. */
#define RING_PENDING 8
#define RING_HELLO_S 5.0
#define RING_GRACE_S 0.2

/* The answer rank `from` gives to nonce. */
static void ring_answer_make(const struct comm_cpu *c, const unsigned char *nonce, int from,
			     long gen, unsigned char out[RING_ANSWER])
{
	const char *secret = store_secret(c->st);
	uint32_t head[4] = {htonl(RING_MAGIC), htonl((uint32_t)from),
			    htonl((uint32_t)c->base.world_size), htonl((uint32_t)gen)};
	struct dp_hmac h;
	memcpy(out, head, sizeof(head));
	dp_hmac_init(&h, secret, strlen(secret));
	dp_hmac_update(&h, RING_LABEL, sizeof(RING_LABEL)); /* with its NUL */
	dp_hmac_update(&h, nonce, RING_NONCE);
	dp_hmac_update(&h, head + 1, 3 * sizeof(uint32_t));
	dp_hmac_final(&h, out + sizeof(head));
}

/* Connects to the next rank (TCP only: the handshake follows in ring_handshake). */
static int ring_connect(struct comm_cpu *c, const char *addr, double deadline, struct dp_error *err)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char name[300];
	int e = 0;
	store_rank_name(c->st, c->next, name, sizeof(name));
	if (parse_addr(addr, &ss, &len) < 0)
		return errprintf(err, "comm: %s published a bad address '%s'", name, addr);
	for (;;) {
		int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return errprintf(err, "comm: socket: %s", strerror(errno));
		sock_tune(fd);
		e = 0;
		if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
			e = errno;
			if (e == EINPROGRESS) {
				struct pollfd p = {.fd = fd, .events = POLLOUT};
				socklen_t l = sizeof(e);
				if (poll(&p, 1, ms_until(deadline)) <= 0)
					e = ETIMEDOUT;
				else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
					e = errno;
			}
		}
		if (e == 0) {
			c->next_fd = fd;
			return 0;
		}
		close(fd);
		if (now_s() >= deadline || (e != ECONNREFUSED && e != EINTR))
			break;
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return errprintf(err, "comm: cannot connect to %s at %s: %s", name, addr, strerror(e));
}

/* A connection to this rank's ring port, heard until it answers its challenge. */
struct ring_peer {
	int fd;
	unsigned long seq; /* accepted as the seq'th: the oldest makes room */
	double by;	   /* dropped if it has not answered by then */
	unsigned char challenge[RING_CHALLENGE], answer[RING_ANSWER];
	size_t sent, got;
};

/* What this rank says to the next one: its challenge read, the answer sent, its word that it
 * took the connection read. */
struct ring_out {
	unsigned char challenge[RING_CHALLENGE], answer[RING_ANSWER], taken[4];
	size_t got, sent, heard;
};

/* Moves bytes [*done, n) over a nonblocking socket: 1 when all are through, 0 for later, -1
 * when the peer closed or the socket broke (errno; 0 for a close). */
static int io_some(int fd, unsigned char *p, size_t n, size_t *done, int out)
{
	while (*done < n) {
		ssize_t k = out ? send(fd, p + *done, n - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
				: recv(fd, p + *done, n - *done, MSG_DONTWAIT);
		if (k > 0) {
			*done += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (k == 0)
			errno = 0;
		return -1;
	}
	return 1;
}

/* The next rank's challenge, this rank's answer, the next rank's word that it took the
 * connection: 1 when done, 0 for later, -1 when the connection closed or broke, -2 when what
 * came is not what a dptrain rank's ring port says. */
static int ring_answer(struct comm_cpu *c, struct ring_out *o, long gen)
{
	uint32_t magic;
	int r;
	if (o->got < RING_CHALLENGE) {
		r = io_some(c->next_fd, o->challenge, RING_CHALLENGE, &o->got, 0);
		if (r <= 0)
			return r;
		memcpy(&magic, o->challenge, 4);
		if (ntohl(magic) != RING_MAGIC)
			return -2;
		ring_answer_make(c, o->challenge + 4, c->base.rank, gen, o->answer);
	}
	if ((r = io_some(c->next_fd, o->answer, RING_ANSWER, &o->sent, 1)) <= 0)
		return r;
	if ((r = io_some(c->next_fd, o->taken, sizeof(o->taken), &o->heard, 0)) <= 0)
		return r;
	memcpy(&magic, o->taken, 4);
	return ntohl(magic) == RING_MAGIC ? 1 : -2;
}

/* Hears the connections at this rank's ring port: 1 if one answered as c->prev (it becomes
 * c->prev_fd), 0 if not yet; the others that answered wrong, broke or ran out of time are
 * dropped (*refused). */
static int ring_hear(struct comm_cpu *c, struct ring_peer *peer, size_t *npeer, long gen,
		     int *refused)
{
	for (size_t i = 0; i < *npeer;) {
		struct ring_peer *p = &peer[i];
		int r = p->by > 0 ? io_some(p->fd, p->challenge, RING_CHALLENGE, &p->sent, 1) : -1;
		if (r > 0)
			r = io_some(p->fd, p->answer, RING_ANSWER, &p->got, 0);
		if (r > 0) {
			unsigned char want[RING_ANSWER];
			ring_answer_make(c, p->challenge + 4, c->prev, gen, want);
			uint32_t taken = htonl(RING_MAGIC);
			size_t said = 0;
			if (dp_equal_ct(p->answer, want, sizeof(want)) &&
			    io_some(p->fd, (unsigned char *)&taken, 4, &said, 1) > 0) {
				sock_tune(p->fd);
				c->prev_fd = p->fd;
				peer[i] = peer[--*npeer];
				return 1;
			}
		}
		if (r == 0 && now_s() < p->by) {
			i++;
			continue;
		}
		*refused = 1;
		close(p->fd);
		peer[i] = peer[--*npeer];
	}
	return 0;
}

/* Takes the connections waiting at this rank's ring port and sends each its challenge. With
 * RING_PENDING heard already, those are heard first (the neighbour's answer may be there),
 * then the oldest goes if it had RING_GRACE_S to answer; if not, the rest wait in the backlog
 * until *take_after. 1 if the previous rank answered meanwhile, 0, or -1 if no nonce could be
 * made. */
static int ring_take(struct comm_cpu *c, int lfd, struct ring_peer *peer, size_t *npeer,
		     unsigned long *seq, long gen, int *refused, double *take_after,
		     struct dp_error *err)
{
	int fd;
	for (;;) {
		if (*npeer == RING_PENDING && ring_hear(c, peer, npeer, gen, refused))
			return 1;
		if (*npeer == RING_PENDING) {
			size_t old = 0;
			for (size_t i = 1; i < *npeer; i++)
				if (peer[i].seq < peer[old].seq)
					old = i;
			double taken = peer[old].by - RING_HELLO_S;
			struct pollfd q = {.fd = lfd, .events = POLLIN};
			if (now_s() < taken + RING_GRACE_S) {
				*take_after = taken + RING_GRACE_S;
				return 0;
			}
			if (poll(&q, 1, 0) != 1) /* room for none: keep the oldest */
				return 0;
			close(peer[old].fd);
			peer[old] = peer[--*npeer];
			*refused = 1;
		}
		if ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) < 0)
			return 0;
		struct ring_peer *p = &peer[(*npeer)++];
		memset(p, 0, sizeof(*p));
		p->fd = fd;
		p->seq = ++*seq;
		p->by = now_s() + RING_HELLO_S;
		uint32_t magic = htonl(RING_MAGIC);
		memcpy(p->challenge, &magic, 4);
		if (dp_random(p->challenge + 4, RING_NONCE, err) < 0)
			return errprefix(err, "comm: cannot make the ring's challenge");
		if (io_some(fd, p->challenge, RING_CHALLENGE, &p->sent, 1) < 0)
			p->by = 0; /* gone already: dropped when heard */
	}
}

/* Connects to the next rank and takes the previous one's connection, each with the handshake
 * above, at the same time: every rank connects first (the next rank listens already: it
 * published its address after listen, so the connection waits in its backlog), then hears its
 * port while it answers the next rank's challenge. */
static int ring_handshake(struct comm_cpu *c, int lfd, const char *addr, long gen, double deadline,
			  struct dp_error *err)
{
	struct ring_peer peer[RING_PENDING];
	struct ring_out o = {0};
	size_t npeer = 0;
	unsigned long seq = 0;
	int answered = 0, refused = 0, rv = -1;
	double take_after = 0; /* the listener rests until then (ring_take) */
	char prev[300], next[300];
	store_rank_name(c->st, c->prev, prev, sizeof(prev));
	store_rank_name(c->st, c->next, next, sizeof(next));
	if (ring_connect(c, addr, deadline, err) < 0)
		return -1;
	while (c->prev_fd < 0 || !answered) {
		struct pollfd p[3 + RING_PENDING];
		int np = 0, at_next = -1, at_lfd = -1;
		double wake = deadline;
		p[np++] = (struct pollfd){.fd = store_fd(c->st), .events = POLLIN};
		if (!answered) {
			at_next = np;
			int sending = o.got == RING_CHALLENGE && o.sent < RING_ANSWER;
			p[np++] =
			    (struct pollfd){.fd = c->next_fd, .events = sending ? POLLOUT : POLLIN};
		}
		if (c->prev_fd < 0) {
			int rest = now_s() < take_after;
			at_lfd = np;
			p[np++] = (struct pollfd){.fd = rest ? -1 : lfd, .events = POLLIN};
			wake = rest && take_after < wake ? take_after : wake;
			for (size_t i = 0; i < npeer; i++) {
				p[np++] = (struct pollfd){
				    .fd = peer[i].fd,
				    .events = peer[i].sent < RING_CHALLENGE ? POLLOUT : POLLIN};
				wake = peer[i].by < wake ? peer[i].by : wake;
			}
		}
		int n = poll(p, (nfds_t)np, ms_until(wake));
		if (n < 0 && errno != EINTR) {
			errprintf(err, "comm: poll: %s", strerror(errno));
			goto out;
		}
		if (p[0].revents && store_poll_abort(c->st, 0, err) == 1) {
			errprefix(err, "comm");
			goto out;
		}
		if (at_next >= 0 && p[at_next].revents) {
			int r = ring_answer(c, &o, gen);
			if (r == -2) {
				errprintf(err,
					  "comm: %s's ring port (%s) did not send a dptrain ring "
					  "challenge",
					  next, addr);
				goto out;
			}
			if (r < 0) {
				/* dropped by the next rank before it took the connection (the
				 * oldest of too many at once): again, at once; if its port is
				 * gone, so is the rank, which the store names */
				double soon = now_s() + 2 < deadline ? now_s() + 2 : deadline;
				close(c->next_fd);
				c->next_fd = -1;
				o = (struct ring_out){0};
				if (ring_connect(c, addr, soon, err) < 0) {
					if (store_poll_abort(c->st, CPU_PEER_WAIT_S, err) == 1)
						errprefix(err, "comm");
					goto out;
				}
			}
			answered = r > 0;
		}
		if (at_lfd >= 0 && !ring_hear(c, peer, &npeer, gen, &refused) &&
		    p[at_lfd].revents &&
		    ring_take(c, lfd, peer, &npeer, &seq, gen, &refused, &take_after, err) < 0)
			goto out;
		if (now_s() >= deadline && (c->prev_fd < 0 || !answered))
			break;
	}
	if (c->prev_fd >= 0 && answered)
		rv = 0;
	else if (c->prev_fd < 0)
		errprintf(err, "comm: %s did not connect within the timeout%s%s%s", prev,
			  refused ? " (a connection that was not " : "", refused ? prev : "",
			  refused ? "'s was refused)" : "");
	else
		errprintf(err,
			  "comm: %s at %s did not take this rank's ring connection within the "
			  "timeout",
			  next, addr);
out:
	for (size_t i = 0; i < npeer; i++)
		close(peer[i].fd);
	return rv;
}

/* ---------------------------------------------------------------------------------------
 * Which ranks share a node, and making the comm. */

/* What this rank's host is, as far as sharing memory goes: its name (for people), its boot (a
 * machine), its network namespace (where the abstract socket that hands the segment over is
 * seen). o->node (tests) stands for all of it; tcp_only makes every rank a node of its own. */
/* This rank is a node of its own, in the TCP ring: comm_cpu_opts.tcp_only, DPTRAIN_COMM_SHM=0. */
static int tcp_only(const struct comm_cpu_opts *o)
{
	const char *off = getenv(ENV_DPTRAIN_COMM_SHM);
	if (o && o->node && *o->node)
		return 0;
	return (o && o->tcp_only) || (off && strcmp(off, "0") == 0);
}

static void host_identity(char *buf, size_t len, const struct comm_cpu_opts *o, int rank)
{
	char host[256] = "", *boot = NULL;
	size_t blen;
	struct dp_error e;
	struct stat ns;
	if (o && o->node && *o->node) {
		snprintf(buf, len, "node %s", o->node);
		return;
	}
	if (tcp_only(o)) {
		snprintf(buf, len, "rank %d", rank);
		return;
	}
	gethostname(host, sizeof(host) - 1);
	if (dp_read_file("/proc/sys/kernel/random/boot_id", 64, 0, &boot, &blen, &e) == 0)
		boot[strcspn(boot, "\n")] = 0;
	if (stat("/proc/self/ns/net", &ns) < 0)
		memset(&ns, 0, sizeof(ns));
	snprintf(buf, len, "host %s boot %s netns %llu:%llu", host, boot ? boot : "?",
		 (unsigned long long)ns.st_dev, (unsigned long long)ns.st_ino);
	free(boot);
}

/* Every rank publishes its host's identity; rank 0 numbers the nodes in the order of their
 * lowest rank and publishes every rank's node ("0 0 1 1 ..."), which every rank reads. */
static int topology(struct comm_cpu *c, const struct comm_cpu_opts *o, long gen,
		    struct dp_error *err)
{
	int w = c->base.world_size, rv = -1;
	char key[128], id[512], name[300];
	char **ids = NULL, *text = NULL;
	void *v = NULL;
	size_t vlen;
	c->node_of = calloc((size_t)w, sizeof(int));
	c->local_of = calloc((size_t)w, sizeof(int));
	c->packed = calloc((size_t)w, sizeof(int));
	c->first = calloc((size_t)w + 1, sizeof(int));
	c->boff = calloc((size_t)w, sizeof(size_t));
	c->blen = calloc((size_t)w, sizeof(size_t));
	if (!c->node_of || !c->local_of || !c->packed || !c->first || !c->boff || !c->blen)
		return errprintf(err, "comm: out of memory");
	host_identity(id, sizeof(id), o, c->base.rank);
	if (c->base.rank != 0) {
		snprintf(key, sizeof(key), "dptrain.comm.cpu.%ld.host.%d", gen, c->base.rank);
		if (store_set(c->st, key, id, strlen(id), err) < 0)
			return -1;
		snprintf(key, sizeof(key), "dptrain.comm.cpu.%ld.nodes", gen);
		if (store_get(c->st, key, &v, &vlen, c->timeout_s, err) < 0)
			return errprefix(err, "comm: waiting for rank 0's list of the nodes");
		const char *p = v;
		for (int r = 0; r < w; r++) {
			char *end;
			long m = strtol(p, &end, 10);
			if (end == p || m < 0 || m >= w) {
				errprintf(err, "comm: rank 0 published a bad list of the nodes");
				goto out;
			}
			c->node_of[r] = (int)m;
			p = end;
		}
	} else {
		ids = calloc((size_t)w, sizeof(char *));
		text = malloc((size_t)w * 12 + 1);
		if (!ids || !text || !(ids[0] = strdup(id))) {
			errprintf(err, "comm: out of memory");
			goto out;
		}
		size_t at = 0;
		int nodes = 0;
		for (int r = 0; r < w; r++) {
			if (r > 0) {
				size_t n;
				snprintf(key, sizeof(key), "dptrain.comm.cpu.%ld.host.%d", gen, r);
				if (store_get(c->st, key, (void **)&ids[r], &n, c->timeout_s, err) <
				    0) {
					errprefix(err, "comm: waiting for %s's host",
						  store_rank_name(c->st, r, name, sizeof(name)));
					goto out;
				}
			}
			int m = 0;
			while (m < r && strcmp(ids[m], ids[r]) != 0)
				m++;
			c->node_of[r] = m < r ? c->node_of[m] : nodes++;
			at += (size_t)sprintf(text + at, "%s%d", r ? " " : "", c->node_of[r]);
		}
		snprintf(key, sizeof(key), "dptrain.comm.cpu.%ld.nodes", gen);
		if (store_set(c->st, key, text, at, err) < 0)
			goto out;
	}
	/* the ranks node by node; each node's ascending, its first one its leader */
	for (int r = 0; r < w; r++)
		c->nnodes = c->node_of[r] + 1 > c->nnodes ? c->node_of[r] + 1 : c->nnodes;
	for (int r = 0; r < w; r++)
		c->first[c->node_of[r] + 1]++;
	for (int m = 0; m < c->nnodes; m++)
		c->first[m + 1] += c->first[m];
	int *fill = calloc((size_t)c->nnodes, sizeof(int));
	if (!fill) {
		errprintf(err, "comm: out of memory");
		goto out;
	}
	for (int r = 0; r < w; r++) {
		int m = c->node_of[r];
		c->local_of[r] = fill[m];
		c->packed[c->first[m] + fill[m]++] = r;
	}
	free(fill);
	c->node = c->node_of[c->base.rank];
	c->local = c->local_of[c->base.rank];
	c->nlocal = c->first[c->node + 1] - c->first[c->node];
	/* the ring: the nodes' leaders in the nodes' order */
	c->rw = c->nnodes;
	c->rr = c->node;
	c->next = c->packed[c->first[(c->node + 1) % c->nnodes]];
	c->prev = c->packed[c->first[(c->node + c->nnodes - 1) % c->nnodes]];
	rv = 0;
out:
	for (int r = 0; ids && r < w; r++)
		free(ids[r]);
	free(ids);
	free(text);
	free(v);
	return rv;
}

/* This rank's ring port: listen on the address of its store connection, publish it. */
static int ring_listen(struct comm_cpu *c, long gen, int *lfd, struct dp_error *err)
{
	struct store *st = c->st;
	char key[128], me[INET6_ADDRSTRLEN + 16];
	struct sockaddr_storage ss;
	socklen_t len;
	snprintf(me, sizeof(me), "%s:0", store_local_addr(st));
	if (strchr(store_local_addr(st), ':'))
		snprintf(me, sizeof(me), "[%s]:0", store_local_addr(st));
	if (parse_addr(me, &ss, &len) < 0)
		return errprintf(err, "comm: cannot use this rank's address '%s'",
				 store_local_addr(st));
	*lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (*lfd < 0)
		return errprintf(err, "comm: socket: %s", strerror(errno));
	sock_tune(*lfd);
	if (bind(*lfd, (struct sockaddr *)&ss, len) < 0 || listen(*lfd, 16) < 0 ||
	    getsockname(*lfd, (struct sockaddr *)&ss, &len) < 0)
		return errprintf(err, "comm: cannot listen on %s: %s", store_local_addr(st),
				 strerror(errno));
	int port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
						 : ((struct sockaddr_in6 *)&ss)->sin6_port);
	snprintf(me, sizeof(me), strchr(store_local_addr(st), ':') ? "[%s]:%d" : "%s:%d",
		 store_local_addr(st), port);
	snprintf(key, sizeof(key), "dptrain.comm.cpu.%ld.addr.%d", gen, c->base.rank);
	return store_set(st, key, me, strlen(me), err);
}

/* This rank's end of the ring: meet the next and previous leaders (ring_handshake). */
static int ring_make(struct comm_cpu *c, int lfd, long gen, double deadline, struct dp_error *err)
{
	char key[128];
	void *addr = NULL;
	size_t addrlen;
	int rv = -1;
	c->ring = malloc(2 * c->chunk);
	if (!c->ring)
		return errprintf(err, "comm: out of memory (2 chunks of %zu bytes)", c->chunk);
	snprintf(key, sizeof(key), "dptrain.comm.cpu.%ld.addr.%d", gen, c->next);
	if (store_get(c->st, key, &addr, &addrlen, c->timeout_s, err) < 0)
		goto out;
	if (ring_handshake(c, lfd, addr, gen, deadline, err) < 0)
		goto out;
	rv = 0;
out:
	free(addr);
	return rv;
}

int comm_cpu_create(struct comm **out, struct store *st, const struct comm_cpu_opts *o,
		    struct dp_error *err)
{
	struct comm_cpu *c = calloc(1, sizeof(*c));
	int rv = -1, w, lfd = -1;
	*out = NULL;
	if (!c)
		return errprintf(err, "comm: out of memory");
	c->ops = cpu_ops;
	c->base.ops = &c->ops;
	c->base.rank = store_rank(st);
	c->base.world_size = w = store_world_size(st);
	c->st = st;
	c->next_fd = c->prev_fd = -1;
	c->rr = c->base.rank;
	c->rw = w;
	c->nnodes = 1;
	c->nlocal = 1;
	c->timeout_s = o && o->timeout_s > 0 ? o->timeout_s : 300;
	/* the ranks waiting in a collective answer the store's roll call at once, whenever
	 * their own timers would fire: the grace is for a rank that is elsewhere in the
	 * program (computing) and about to come */
	c->grace_s = c->timeout_s / 10 < 1 ? 1 : c->timeout_s / 10 > 10 ? 10 : c->timeout_s / 10;
	c->chunk = o && o->chunk_bytes ? o->chunk_bytes : CPU_CHUNK_DEFAULT;
	c->chunk = c->chunk < 64 ? 64 : c->chunk / 8 * 8;
	c->op = "comm";
	c->ctl = (struct shm_ctl){.st = st,
				  .aborted = &c->aborted,
				  .op = "comm",
				  .timeout_s = c->timeout_s,
				  .grace_s = c->grace_s};
	pthread_mutex_init(&c->abort_lock, NULL);
	snprintf(c->name, sizeof(c->name), "cpu");
	c->ops.name = c->name;
	c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->wake_fd < 0) {
		errprintf(err, "comm: eventfd: %s", strerror(errno));
		goto out;
	}
	if (w > 1) {
		double deadline = now_s() + c->timeout_s;
		char key[128];
		long gen;
		/* the comms this rank made before: the same count on every rank */
		snprintf(key, sizeof(key), "dptrain.comm.cpu.created.%d", c->base.rank);
		if (store_add(st, key, 1, &gen, err) < 0)
			goto out;
		/* a rank of the TCP ring alone leads a node of its own: its port is published
		 * before the nodes are known (as before there were nodes) */
		if (tcp_only(o) && ring_listen(c, gen, &lfd, err) < 0)
			goto out;
		if (topology(c, o, gen, err) < 0)
			goto out;
		c->gen = gen;
		if (c->nlocal > 1) {
			struct shm_node nd = {.world = w,
					      .nlocal = c->nlocal,
					      .local = c->local,
					      .ranks = c->packed + c->first[c->node],
					      .node = c->node,
					      .gen = gen,
					      .slice_bytes = o ? o->chunk_bytes : 0,
					      .stream_min = o ? o->stream_min : 0};
			if (shm_create(&c->g, &c->ctl, &nd, err) < 0)
				goto out;
		}
		if (c->local == 0 && c->nnodes > 1 &&
		    ((lfd < 0 && ring_listen(c, gen, &lfd, err) < 0) ||
		     ring_make(c, lfd, gen, deadline, err) < 0))
			goto out;
		if (c->nnodes == 1)
			snprintf(c->name, sizeof(c->name),
				 "cpu (shared memory: %d ranks on 1 node)", w);
		else if (ring_only(c))
			snprintf(c->name, sizeof(c->name), "cpu (TCP ring)");
		else
			snprintf(c->name, sizeof(c->name),
				 "cpu (shared memory in each node, TCP ring between %d nodes)",
				 c->nnodes);
	}
	*out = &c->base;
	c = NULL;
	rv = 0;
out:
	if (lfd >= 0)
		close(lfd);
	if (c)
		cpu_destroy(&c->base);
	return rv;
}
