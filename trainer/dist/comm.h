/* comm.h — collectives between the data-parallel ranks behind one interface: the CPU engine
 * (shared memory within a node, comm_shm.c, and a TCP ring between the nodes, comm_cpu.c)
 * and, on GPUs, NCCL. Owns the wire protocol, the reduction order and the abort path; knows
 * nothing of models or optimizers.
 *
 * Semantics follow NCCL. Buffers are host memory for the CPU engine. Every operation is
 * collective: all ranks call the same operations in the same order with the same counts.
 * One thread at a time per comm. Results are bitwise identical on every rank and from run to
 * run (the engine fixes who adds what in which order: comm_cpu.c, "Reduction order"). A failure (a
 * rank died, a rank stopped taking part, the timeout passed, an abort) returns -1 with a message
 * naming the rank; the comm is then unusable and every later call fails at once with the same
 * message. */
#ifndef DPTRAIN_COMM_H
#define DPTRAIN_COMM_H

#include <stdarg.h>
#include <stddef.h>
#include "common/error.h"

struct store;

enum comm_dtype { COMM_F32, COMM_F64 };
enum comm_redop { COMM_SUM, COMM_AVG };

struct comm;

struct comm_ops {
	const char *name; /* "cpu", "nccl" */
	/* In place: buf holds count elements on every rank; afterwards the sum (average). */
	int (*allreduce)(struct comm *c, void *buf, size_t count, enum comm_dtype t,
			 enum comm_redop op, struct dp_error *err);
	/* in: count * world_size elements; out: count elements, this rank's block (block r is
	 * in[r * count .. (r + 1) * count)) reduced over ranks. out may be in + rank * count. */
	int (*reduce_scatter)(struct comm *c, const void *in, void *out, size_t count,
			      enum comm_dtype t, enum comm_redop op, struct dp_error *err);
	/* in: count elements; out: count * world_size, rank r's in at block r. in may be
	 * out + rank * count. */
	int (*allgather)(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype t,
			 struct dp_error *err);
	/* bytes from root's buf to every rank's buf. */
	int (*broadcast)(struct comm *c, void *buf, size_t bytes, int root, struct dp_error *err);
	int (*barrier)(struct comm *c, struct dp_error *err);
	/* Optional (NCCL): the operations issued after this call start on the device once the work
	 * behind mark (a backend marker, backend.h, recorded on this comm's GPU) is done; the
	 * calling thread does not wait. Not collective. NULL: the caller waits for the marker. */
	int (*after)(struct comm *c, void *mark, struct dp_error *err);
	/* Optional, collective (every rank asks for the same bytes): *buf = memory of bytes that
	 * this comm's allreduce reduces in place, without copies (the CPU engine on a node of
	 * several ranks: a buffer in the node's shared memory, which the others read and write
	 * while an allreduce of it runs), or NULL where the comm has none (then the caller uses
	 * its own memory).
	 * Once per comm; the memory goes with the comm. An allreduce of part of it must name the
	 * same part (offset and count) on every rank. NULL: never any. */
	int (*shared_alloc)(struct comm *c, size_t bytes, void **buf, struct dp_error *err);
	/* From any thread: make operations in progress and later ones fail with reason, and tell
	 * the other ranks (through the store). */
	void (*abort)(struct comm *c, const char *reason);
	void (*destroy)(struct comm *c);
};

struct comm {
	const struct comm_ops *ops;
	int rank, world_size;
};

/* An engine's first failure, kept: the engine is poisoned, and this and every later call fail
 * with "<op>: <message>" (both engines, comm_fail.c). */
struct comm_failure {
	int failed;
	struct dp_error msg;
};

/* Record the failure unless one is kept already, copy the kept one to err; returns -1. */
int comm_failv(struct comm_failure *f, const char *op, struct dp_error *err, const char *fmt,
	       va_list ap) __attribute__((format(printf, 4, 0)));

struct comm_cpu_opts {
	double timeout_s;   /* one operation; 0: 300 */
	size_t chunk_bytes; /* pipelining unit of the ring and of the shared memory's slices;
			       0: the defaults (see comm_cpu.c, comm_shm.c) */
	int tcp_only;	    /* 1: every rank a node of its own, all in the TCP ring (as does
			       DPTRAIN_COMM_SHM=0); the same on every rank */
	const char *node;   /* tests: this rank's node, instead of its host's identity (ranks of
			       one name must run on one host); NULL or "": the host's */
	size_t stream_min;  /* tests: the shared memory's outputs of this many bytes or more are
			       written with streaming stores; 0: the machine's rule (comm_shm.c) */
};

/* The CPU engine over the store's job. Ranks on one host (the same boot and network
 * namespace) form a node, which reduces through shared memory (comm_shm.h); the nodes' leaders
 * (each node's lowest rank) form a TCP ring: each listens on an ephemeral port on the address
 * its store connection uses, publishes it in the store, and connects to the next node's
 * leader. The comm's ops->name says which ("cpu (shared memory: 4 ranks on 1 node)"). st
 * stays owned by the caller and must outlive the comm. */
int comm_cpu_create(struct comm **c, struct store *st, const struct comm_cpu_opts *o,
		    struct dp_error *err);

static inline size_t comm_dtype_size(enum comm_dtype t)
{
	return t == COMM_F64 ? 8 : 4;
}

/* An even split of total elements over the ranks: rank's contiguous share [*lo, *hi) (ZeRO-1
 * uses it for the optimizer state and the parameter update). */
static inline void comm_share(size_t total, int rank, int world_size, size_t *lo, size_t *hi)
{
	*lo = (size_t)((unsigned long long)total * (unsigned)rank / (unsigned)world_size);
	*hi = (size_t)((unsigned long long)total * (unsigned)(rank + 1) / (unsigned)world_size);
}

/* Every rank's share of buf (comm_share of total floats) from that rank to all: afterwards
 * every rank holds the whole buffer. */
static inline int comm_gather_shares(struct comm *c, float *buf, size_t total, struct dp_error *err)
{
	for (int r = 0; r < c->world_size; r++) {
		size_t lo, hi;
		comm_share(total, r, c->world_size, &lo, &hi);
		if (c->ops->broadcast(c, buf + lo, (hi - lo) * sizeof(float), r, err) < 0)
			return -1;
	}
	return 0;
}

struct comm_nccl_opts {
	int device;	  /* this rank's GPU: one per rank, never shared, unless share_gpu */
	int share_gpu;	  /* ranks of a host may share a GPU where NCCL can (2.30 or later, with
			     NCCL_MULTI_RANK_GPU_ENABLE=1; device.allow_shared_gpu); else refused */
	double timeout_s; /* one operation, and the creation; 0: 300 */
};

/* How a staged comm (comm_staged_create) tells device memory and copies it: is_device(ctx, p)
 * whether p is device memory; copy(ctx, dst, src, bytes, to_dev, err) from device to host
 * memory (to_dev 0) or back, 0 or -1 with err; host_alloc/host_free the host buffer (CUDA's
 * pinned memory; either NULL: malloc and free); owns_ctx: free(ctx) at destroy. */
struct comm_stage {
	void *ctx;
	int (*is_device)(void *ctx, const void *p);
	int (*copy)(void *ctx, void *dst, const void *src, size_t bytes, int to_dev,
		    struct dp_error *err);
	void *(*host_alloc)(void *ctx, size_t bytes);
	void (*host_free)(void *ctx, void *p);
	int owns_ctx;
};

/* A comm over inner (taken: destroyed with it, or at once if this fails) for ranks whose
 * buffers may be device memory: an operation on device memory runs on inner through a host
 * buffer (copied out, reduced, copied back; inner's order, bits and failures); on host memory
 * inner runs it as it is (comm_staged.c). Its name is inner's with ", staged through host
 * memory". For GPU ranks without NCCL between them. */
int comm_staged_create(struct comm **c, struct comm *inner, const struct comm_stage *st,
		       struct dp_error *err);
/* The same with CUDA's copies on GPU device (made current in the calling thread first) and a
 * pinned host buffer; a build without CUDA fails with a message. */
int comm_staged_cuda(struct comm **c, struct comm *inner, int device, struct dp_error *err);

/* NCCL between the ranks of the store's job, one GPU per rank (device); on builds or machines
 * without NCCL or a GPU it fails (*c = NULL) with a message. Buffers in that GPU's memory go to
 * NCCL as they are; any other buffer (host memory, malloc'ed or pinned, on either side of
 * reduce_scatter and allgather independently) is staged: copied to a device buffer the comm
 * owns, reduced there and copied back, which costs two copies, fine for small values.
 * An operation runs on the comm's own stream: what the caller's streams write to its buffers
 * must be finished when it is called (synchronize them); its results are there when it
 * returns. st stays owned by the caller and must outlive the comm. */
int comm_nccl_create(struct comm **c, struct store *st, const struct comm_nccl_opts *o,
		     struct dp_error *err);

#endif
