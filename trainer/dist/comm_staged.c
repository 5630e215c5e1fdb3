/* comm_staged.c — a comm of comm.h for GPU ranks without NCCL between them: every operation
 * runs on the CPU engine (or any inner comm), and a buffer in device memory is staged through
 * host memory the comm owns: copied out, reduced by the inner comm, copied back. Host buffers
 * go to the inner comm as they are. For ranks that share a GPU where the NCCL at hand cannot
 * put two ranks on one (before NCCL 2.30, or without NCCL_MULTI_RANK_GPU_ENABLE), for nodes
 * without NCCL, and for the tests of DDP and ZeRO on the real CUDA backend on one GPU. Two
 * copies per operation and the host's bandwidth: a fallback, not the fast path.
 *
 * The copies are the caller's (struct comm_stage): comm_staged_cuda (comm_staged_cuda.c) gives
 * CUDA's, on the rank's GPU, made current in the calling thread first (DDP reduces from a
 * thread of its own). The reduction order, the bits and the failures are the inner comm's;
 * the results on the device are the host's bits, copied. Owns the inner comm and the host
 * buffer. */
#define _GNU_SOURCE
#include "trainer/dist/comm.h"
#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct comm_staged {
	struct comm base; /* first: the struct comm * the caller holds */
	struct comm *in;
	struct comm_stage st;
	struct comm_ops ops;
	char name[160];
	unsigned char *host; /* the staging buffer: in and out halves where an op has both */
	size_t cap;
};

/* struct comm_stage's defaults for the host buffer */
static void *plain_alloc(void *ctx, size_t bytes)
{
	(void)ctx;
	return malloc(bytes);
}

static void plain_free(void *ctx, void *p)
{
	(void)ctx;
	free(p);
}

static int host_room(struct comm_staged *s, size_t bytes, struct dp_error *err)
{
	if (bytes <= s->cap)
		return 0;
	void *p = s->st.host_alloc(s->st.ctx, bytes);
	if (!p)
		return errprintf(err, "out of memory (%zu bytes of host memory to stage through)",
				 bytes);
	if (s->host)
		s->st.host_free(s->st.ctx, s->host);
	s->host = p;
	s->cap = bytes;
	return 0;
}

/* A device buffer: copied to (to_dev 0) or from host memory. A failure names the op and
 * aborts the inner comm, so that the others, waiting for this rank, fail at once too. */
static int stage(struct comm_staged *s, const char *op, void *dst, const void *src, size_t bytes,
		 int to_dev, struct dp_error *err)
{
	if (bytes == 0 || s->st.copy(s->st.ctx, dst, src, bytes, to_dev, err) == 0)
		return 0;
	errprefix(err, "rank %d: %s: staging %zu bytes %s the GPU", s->base.rank, op, bytes,
		  to_dev ? "back to" : "from");
	s->in->ops->abort(s->in, err->text);
	return -1;
}

static int on_dev(struct comm_staged *s, const void *p)
{
	return p && s->st.is_device(s->st.ctx, p);
}

static int staged_allreduce(struct comm *base, void *buf, size_t count, enum comm_dtype t,
			    enum comm_redop op, struct dp_error *err)
{
	struct comm_staged *s = (struct comm_staged *)base;
	size_t bytes = count * comm_dtype_size(t);
	if (!on_dev(s, buf))
		return s->in->ops->allreduce(s->in, buf, count, t, op, err);
	if (host_room(s, bytes, err) < 0 ||
	    stage(s, "allreduce", s->host, buf, bytes, 0, err) < 0 ||
	    s->in->ops->allreduce(s->in, s->host, count, t, op, err) < 0)
		return -1;
	return stage(s, "allreduce", buf, s->host, bytes, 1, err);
}

static int staged_reduce_scatter(struct comm *base, const void *in, void *out, size_t count,
				 enum comm_dtype t, enum comm_redop op, struct dp_error *err)
{
	struct comm_staged *s = (struct comm_staged *)base;
	size_t es = comm_dtype_size(t), whole = count * es * (size_t)base->world_size;
	int din = on_dev(s, in), dout = on_dev(s, out);
	if (!din && !dout)
		return s->in->ops->reduce_scatter(s->in, in, out, count, t, op, err);
	/* in the host buffer's first part the input, after it the output */
	if (host_room(s, whole + count * es, err) < 0)
		return -1;
	const void *hin = in;
	void *hout = dout ? s->host + whole : out;
	if (din) {
		if (stage(s, "reduce_scatter", s->host, in, whole, 0, err) < 0)
			return -1;
		hin = s->host;
	}
	if (s->in->ops->reduce_scatter(s->in, hin, hout, count, t, op, err) < 0)
		return -1;
	return dout ? stage(s, "reduce_scatter", out, hout, count * es, 1, err) : 0;
}

static int staged_allgather(struct comm *base, const void *in, void *out, size_t count,
			    enum comm_dtype t, struct dp_error *err)
{
	struct comm_staged *s = (struct comm_staged *)base;
	size_t es = comm_dtype_size(t), whole = count * es * (size_t)base->world_size;
	int din = on_dev(s, in), dout = on_dev(s, out);
	if (!din && !dout)
		return s->in->ops->allgather(s->in, in, out, count, t, err);
	if (host_room(s, whole + count * es, err) < 0)
		return -1;
	const void *hin = in;
	void *hout = dout ? s->host : out;
	if (din) {
		if (stage(s, "allgather", s->host + whole, in, count * es, 0, err) < 0)
			return -1;
		hin = s->host + whole;
	}
	if (s->in->ops->allgather(s->in, hin, hout, count, t, err) < 0)
		return -1;
	return dout ? stage(s, "allgather", out, hout, whole, 1, err) : 0;
}

static int staged_broadcast(struct comm *base, void *buf, size_t bytes, int root,
			    struct dp_error *err)
{
	struct comm_staged *s = (struct comm_staged *)base;
	if (!on_dev(s, buf))
		return s->in->ops->broadcast(s->in, buf, bytes, root, err);
	if (host_room(s, bytes, err) < 0 ||
	    (base->rank == root && stage(s, "broadcast", s->host, buf, bytes, 0, err) < 0) ||
	    s->in->ops->broadcast(s->in, s->host, bytes, root, err) < 0)
		return -1;
	return base->rank == root ? 0 : stage(s, "broadcast", buf, s->host, bytes, 1, err);
}

static int staged_barrier(struct comm *base, struct dp_error *err)
{
	struct comm_staged *s = (struct comm_staged *)base;
	return s->in->ops->barrier(s->in, err);
}

static void staged_abort(struct comm *base, const char *reason)
{
	struct comm_staged *s = (struct comm_staged *)base;
	s->in->ops->abort(s->in, reason);
}

static void staged_destroy(struct comm *base)
{
	struct comm_staged *s = (struct comm_staged *)base;
	if (!s)
		return;
	if (s->in)
		s->in->ops->destroy(s->in);
	if (s->host)
		s->st.host_free(s->st.ctx, s->host);
	if (s->st.owns_ctx)
		free(s->st.ctx);
	free(s);
}

int comm_staged_create(struct comm **out, struct comm *inner, const struct comm_stage *st,
		       struct dp_error *err)
{
	*out = NULL;
	struct comm_staged *s = calloc(1, sizeof(*s));
	if (!s) {
		inner->ops->destroy(inner);
		if (st->owns_ctx)
			free(st->ctx);
		return errprintf(err, "comm: out of memory");
	}
	s->in = inner;
	s->st = *st;
	if (!s->st.host_alloc || !s->st.host_free) {
		s->st.host_alloc = plain_alloc;
		s->st.host_free = plain_free;
	}
	s->base.rank = inner->rank;
	s->base.world_size = inner->world_size;
	/* the inner comm's ops, except those that meet device memory; no shared_alloc, no after */
	s->ops = (struct comm_ops){.allreduce = staged_allreduce,
				   .reduce_scatter = staged_reduce_scatter,
				   .allgather = staged_allgather,
				   .broadcast = staged_broadcast,
				   .barrier = staged_barrier,
				   .abort = staged_abort,
				   .destroy = staged_destroy};
	snprintf(s->name, sizeof(s->name), "%s, staged through host memory", inner->ops->name);
	s->ops.name = s->name;
	s->base.ops = &s->ops;
	*out = &s->base;
	return 0;
}
