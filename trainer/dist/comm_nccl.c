/* comm_nccl.c — the NCCL engine of comm.h: one GPU per rank. Every operation is enqueued on the
 * comm's own stream and waited for by polling, so that a dead or stalled rank, the timeout or an
 * abort ends it with a message naming the rank (the store's verdict). Owns its NCCL
 * communicator, stream, barrier word and staging buffer; not the store, not the device.
 *
 * Buffers. NCCL takes only device memory of the comm's GPU, which goes to it as is. Every other
 * buffer — malloc'ed, stack or pinned (cudaHostAlloc) host memory, managed memory, another
 * GPU's memory — is staged: copied into the comm's device buffer on its stream, the operation
 * run there, the result copied back once the operation is done. The trainer sends small host
 * values (loss sums, BatchNorm's counter, checkpoint shards) through the same comm as its
 * device gradients. reduce_scatter and allgather judge in and out separately, so one on the
 * host and the other on the device works too.
 *
 * Threads. NCCL allows one thread at a time on a communicator, and the abort may come from any
 * thread: every NCCL call on it is made under `lock`, and the abort frees it (ncclCommAbort) and
 * sets it to NULL there, so the operation's thread finds it gone at its next look. */
#define _GNU_SOURCE
#include "trainer/dist/comm.h"
#include "common/error.h"
#include "common/clock.h"
#include "common/env.h"
#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

#if defined(HAVE_NCCL) && defined(HAVE_CUDA)

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NCCL_MSG_MAX	  1024
#define NCCL_PEER_WAIT_S  1.0	   /* after an NCCL error: for the store to name a dead rank */
#define NCCL_SLEEP_MIN_NS 2000L	   /* the wait loop's sleep starts here and doubles ... */
#define NCCL_SLEEP_MAX_NS 1000000L /* ... up to 1 ms */
#define NCCL_HOST_MAX	  256
#define NCCL_PCI_MAX	  64
#define NCCL_STAGE_ROUND  (1u << 20) /* the staging buffer grows in whole MiB */

struct comm_nccl {
	struct comm base; /* first: the struct comm * the caller holds */
	struct store *st;
	int device, share_gpu;
	double timeout_s, grace_s;
	unsigned long seq;
	const char *op; /* the operation in progress, for messages */
	double t0;	/* when it started: its deadline is t0 + timeout_s */

	pthread_mutex_t lock; /* guards nc: one NCCL call at a time */
	ncclComm_t nc;	      /* NULL once aborted */
	cudaStream_t stream;
	int *word;   /* the barrier's allreduce, in device memory */
	void *stage; /* host buffers pass through here (device memory, grown on demand) */
	size_t stage_bytes;

	atomic_int aborted;
	char abort_reason[NCCL_MSG_MAX]; /* written once, before aborted is set */

	struct comm_failure failure;
};

static void nccl_sleep(long *ns)
{
	struct timespec ts = {0, *ns};
	nanosleep(&ts, NULL);
	*ns = *ns * 2 > NCCL_SLEEP_MAX_NS ? NCCL_SLEEP_MAX_NS : *ns * 2;
}

/* Frees the NCCL communicator, stopping its kernels, from whichever thread; keeps the caller's
 * current device. Under c->lock. */
static void nc_abort_locked(struct comm_nccl *c)
{
	if (!c->nc)
		return;
	int dev = -1;
	if (cudaGetDevice(&dev) != cudaSuccess)
		dev = -1;
	if (dev != c->device)
		cudaSetDevice(c->device);
	ncclCommAbort(c->nc); /* blocking even for a nonblocking comm; nothing to do if it fails */
	c->nc = NULL;
	if (dev >= 0 && dev != c->device)
		cudaSetDevice(dev);
}

static void nc_abort(struct comm_nccl *c)
{
	pthread_mutex_lock(&c->lock);
	nc_abort_locked(c);
	pthread_mutex_unlock(&c->lock);
}

/* Poisons the comm: this and every later call fail with "<op>: <message>"; the NCCL
 * communicator is aborted, so nothing of this operation runs on. */
static int nccl_fail(struct comm_nccl *c, struct dp_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int nccl_fail(struct comm_nccl *c, struct dp_error *err, const char *fmt, ...)
{
	nc_abort(c);
	va_list ap;
	va_start(ap, fmt);
	comm_failv(&c->failure, c->op, err, fmt, ap);
	va_end(ap);
	return -1;
}

static int nccl_fail_abort(struct comm_nccl *c, struct dp_error *err)
{
	return nccl_fail(c, err, "aborted: %s", c->abort_reason);
}

/* NCCL (or CUDA) failed in `call`: a dead rank is the likely cause if the store names one
 * within a moment; otherwise the fault is this rank's, and the others are told at once rather
 * than at their timeout. */
static int nccl_fail_error(struct comm_nccl *c, const char *call, const char *what,
			   const char *detail, struct dp_error *err)
{
	char me[300];
	if (atomic_load_explicit(&c->aborted, memory_order_acquire))
		return nccl_fail_abort(c, err);
	if (store_poll_abort(c->st, NCCL_PEER_WAIT_S, err) == 1)
		return nccl_fail(c, err, "%s", err->text);
	if (detail && *detail)
		nccl_fail(c, err, "%s failed on GPU %d: %s (%s)", call, c->device, what, detail);
	else
		nccl_fail(c, err, "%s failed on GPU %d: %s", call, c->device, what);
	/* the others are told this rank's failure, named */
	struct dp_error told;
	errprintf(&told, "%s: %s", store_rank_name(c->st, c->base.rank, me, sizeof(me)),
		  c->failure.msg.text);
	store_abort(c->st, told.text);
	return -1;
}

static int nccl_fail_nccl(struct comm_nccl *c, const char *call, ncclResult_t r,
			  struct dp_error *err)
{
	char last[600] = "";
	pthread_mutex_lock(&c->lock);
	const char *l = c->nc ? ncclGetLastError(c->nc) : NULL;
	snprintf(last, sizeof(last), "%s", l ? l : "");
	pthread_mutex_unlock(&c->lock);
	return nccl_fail_error(c, call, ncclGetErrorString(r), last, err);
}

static int nccl_fail_cuda(struct comm_nccl *c, const char *call, cudaError_t e,
			  struct dp_error *err)
{
	return nccl_fail_error(c, call, cudaGetErrorString(e), cudaGetErrorName(e), err);
}

/* The operation's time is up: the store's verdict names who did not take part (the others
 * report too, and the communicator runs on until then, so that theirs is not broken first). */
static int nccl_timeout(struct comm_nccl *c, struct dp_error *err)
{
	int waiting_for = c->base.rank == 0 ? 1 % c->base.world_size : 0; /* NCCL does not say */
	store_report_timeout(c->st, c->seq, c->op, waiting_for, c->timeout_s, c->grace_s, err);
	return nccl_fail(c, err, "%s", err->text);
}

/* ---------------------------------------------------------------------------------------
 * The operations. */

static ncclDataType_t nccl_type(enum comm_dtype t)
{
	return t == COMM_F64 ? ncclFloat64 : ncclFloat32;
}

/* Common entry: the poison and abort checks, the op name, the sequence number, the clock. */
static int nccl_begin(struct comm_nccl *c, const char *op, struct dp_error *err)
{
	c->op = op;
	c->seq++;
	c->t0 = now_s();
	if (c->failure.failed)
		return errprintf(err, "%s", c->failure.msg.text);
	if (atomic_load_explicit(&c->aborted, memory_order_acquire))
		return nccl_fail_abort(c, err);
	cudaError_t e = cudaSetDevice(c->device);
	if (e != cudaSuccess)
		return nccl_fail_cuda(c, "cudaSetDevice", e, err);
	return 0;
}

/* Waits for the operation that `call` enqueued (it returned enq): until the communicator is
 * past ncclInProgress and the stream is idle, an error, the store's abort, this comm's abort,
 * or the deadline. */
static int nccl_wait(struct comm_nccl *c, const char *call, ncclResult_t enq, struct dp_error *err)
{
	long ns = NCCL_SLEEP_MIN_NS;
	if (enq != ncclSuccess && enq != ncclInProgress)
		return nccl_fail_nccl(c, call, enq, err);
	for (;;) {
		if (atomic_load_explicit(&c->aborted, memory_order_acquire))
			return nccl_fail_abort(c, err);
		ncclResult_t r = ncclSuccess, state = ncclInProgress;
		cudaError_t q = cudaErrorNotReady;
		pthread_mutex_lock(&c->lock);
		if (c->nc) {
			r = ncclCommGetAsyncError(c->nc, &state);
			/* until ncclSuccess the work may not be on the stream yet */
			if (r == ncclSuccess && state == ncclSuccess)
				q = cudaStreamQuery(c->stream);
		}
		int gone = !c->nc;
		pthread_mutex_unlock(&c->lock);
		if (gone)
			return nccl_fail_abort(c, err);
		if (r != ncclSuccess)
			return nccl_fail_nccl(c, "ncclCommGetAsyncError", r, err);
		if (state != ncclSuccess && state != ncclInProgress)
			return nccl_fail_nccl(c, call, state, err);
		if (q == cudaSuccess)
			return 0;
		if (q != cudaErrorNotReady)
			return nccl_fail_cuda(c, "cudaStreamQuery", q, err);
		/* an abort from another thread marks the store before its ncclCommAbort: its
		 * reason, not the store's echo of it, whichever this poll saw first */
		if (store_poll_abort(c->st, 0, err) == 1)
			return atomic_load_explicit(&c->aborted, memory_order_acquire)
				   ? nccl_fail_abort(c, err)
				   : nccl_fail(c, err, "%s", err->text);
		if (now_s() >= c->t0 + c->timeout_s)
			return nccl_timeout(c, err);
		nccl_sleep(&ns);
	}
}

/* The communicator, locked for one enqueue, or NULL (not locked) if an abort freed it. */
static ncclComm_t nccl_hold(struct comm_nccl *c)
{
	pthread_mutex_lock(&c->lock);
	ncclComm_t nc = c->nc;
	if (!nc)
		pthread_mutex_unlock(&c->lock);
	return nc;
}

/* ---------------------------------------------------------------------------------------
 * Staging. An operation on a staged buffer: nccl_on_gpu says it is not on the GPU,
 * stage_reserve makes room, stage_in copies the input (enqueued ahead of the NCCL operation,
 * so the stream orders them and nccl_wait's look at the stream covers both), and after
 * nccl_wait stage_out copies the result back. */

/* Whether p goes to NCCL as is: device memory of this comm's GPU. Before CUDA 11,
 * cudaPointerGetAttributes failed on memory CUDA did not allocate instead of answering
 * cudaMemoryTypeUnregistered; that error means host memory too, and is cleared, since the
 * runtime would otherwise hand it to the caller's next cudaGetLastError. */
static int nccl_on_gpu(struct comm_nccl *c, const void *p, int *on_gpu, struct dp_error *err)
{
	struct cudaPointerAttributes a;
	memset(&a, 0, sizeof(a));
	cudaError_t e = cudaPointerGetAttributes(&a, p);
	if (e == cudaErrorInvalidValue) {
		(void)cudaGetLastError();
		*on_gpu = 0;
		return 0;
	}
	if (e != cudaSuccess)
		return nccl_fail_cuda(c, "cudaPointerGetAttributes", e, err);
	*on_gpu = a.type == cudaMemoryTypeDevice && a.device == c->device;
	return 0;
}

/* n elements of es bytes, times k, in *bytes; fails on an overflow, which would make the
 * staging buffer shorter than what NCCL writes into it. */
static int stage_size(struct comm_nccl *c, size_t n, size_t es, size_t k, size_t *bytes,
		      struct dp_error *err)
{
	if (n > SIZE_MAX / es / k)
		return nccl_fail(
		    c, err, "%zu elements of %zu bytes times %zu overflow size_t: a wrong count", n,
		    es, k);
	*bytes = n * es * k;
	return 0;
}

/* The staging buffer, at least bytes long. It grows in whole MiB, so that sizes a little apart
 * (the ranks' shares of a checkpoint) do not free and allocate each time: cudaFree waits for
 * the whole GPU, the caller's streams too (the comm's own is idle between operations). */
static int stage_reserve(struct comm_nccl *c, size_t bytes, struct dp_error *err)
{
	char call[160];
	cudaError_t e;
	if (bytes <= c->stage_bytes)
		return 0;
	size_t want = bytes;
	if (want <= SIZE_MAX - NCCL_STAGE_ROUND)
		want = (want + NCCL_STAGE_ROUND - 1) / NCCL_STAGE_ROUND * NCCL_STAGE_ROUND;
	if (c->stage) {
		e = cudaFree(c->stage);
		c->stage = NULL;
		c->stage_bytes = 0;
		if (e != cudaSuccess)
			return nccl_fail_cuda(c, "cudaFree (the staging buffer for host buffers)",
					      e, err);
	}
	void *p = NULL;
	if ((e = cudaMalloc(&p, want)) != cudaSuccess) {
		snprintf(call, sizeof(call), "cudaMalloc of %zu bytes (staging for host buffers)",
			 want);
		return nccl_fail_cuda(c, call, e, err);
	}
	c->stage = p;
	c->stage_bytes = want;
	return 0;
}

/* bytes from src into the staging buffer at offset at, on the comm's stream. From pageable
 * memory the runtime may first wait for the stream, which is idle here, and src may be reused
 * once this returns. */
static int stage_in(struct comm_nccl *c, size_t at, const void *src, size_t bytes,
		    struct dp_error *err)
{
	char call[160];
	cudaError_t e =
	    cudaMemcpyAsync((char *)c->stage + at, src, bytes, cudaMemcpyDefault, c->stream);
	if (e == cudaSuccess)
		return 0;
	snprintf(call, sizeof(call), "cudaMemcpyAsync of %zu bytes into the staging buffer", bytes);
	return nccl_fail_cuda(c, call, e, err);
}

/* bytes from the staging buffer at offset at to dst, after nccl_wait: the stream then holds
 * this copy alone, so cudaStreamSynchronize waits for nothing a peer can hold up. */
static int stage_out(struct comm_nccl *c, void *dst, size_t at, size_t bytes, struct dp_error *err)
{
	char call[160];
	cudaError_t e =
	    cudaMemcpyAsync(dst, (const char *)c->stage + at, bytes, cudaMemcpyDefault, c->stream);
	if (e != cudaSuccess) {
		snprintf(call, sizeof(call),
			 "cudaMemcpyAsync of %zu bytes out of the staging buffer", bytes);
		return nccl_fail_cuda(c, call, e, err);
	}
	if ((e = cudaStreamSynchronize(c->stream)) != cudaSuccess) {
		snprintf(
		    call, sizeof(call),
		    "cudaStreamSynchronize after the copy of %zu bytes out of the staging buffer",
		    bytes);
		return nccl_fail_cuda(c, call, e, err);
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * The operations proper: each picks its NCCL buffers (the caller's, or the staging buffer),
 * enqueues, waits, and copies a staged result back. */

static int nccl_allreduce(struct comm *base, void *buf, size_t count, enum comm_dtype t,
			  enum comm_redop op, struct dp_error *err)
{
	struct comm_nccl *c = (struct comm_nccl *)base;
	size_t n = 0;
	int on_gpu;
	void *d = buf;
	if (nccl_begin(c, "allreduce", err) < 0)
		return -1;
	if (count == 0)
		return 0;
	if (nccl_on_gpu(c, buf, &on_gpu, err) < 0 ||
	    stage_size(c, count, comm_dtype_size(t), 1, &n, err) < 0)
		return -1;
	if (!on_gpu) {
		if (stage_reserve(c, n, err) < 0 || stage_in(c, 0, buf, n, err) < 0)
			return -1;
		d = c->stage;
	}
	ncclComm_t nc = nccl_hold(c);
	if (!nc)
		return nccl_fail_abort(c, err);
	ncclResult_t r = ncclAllReduce(d, d, count, nccl_type(t),
				       op == COMM_AVG ? ncclAvg : ncclSum, nc, c->stream);
	pthread_mutex_unlock(&c->lock);
	if (nccl_wait(c, "ncclAllReduce", r, err) < 0)
		return -1;
	return on_gpu ? 0 : stage_out(c, buf, 0, n, err);
}

static int nccl_reduce_scatter(struct comm *base, const void *in, void *out, size_t count,
			       enum comm_dtype t, enum comm_redop op, struct dp_error *err)
{
	struct comm_nccl *c = (struct comm_nccl *)base;
	size_t blk, all = 0, out_at = 0;
	int in_gpu, out_gpu;
	const void *din = in;
	void *dout = out;
	if (nccl_begin(c, "reduce_scatter", err) < 0)
		return -1;
	if (count == 0)
		return 0;
	if (nccl_on_gpu(c, in, &in_gpu, err) < 0 || nccl_on_gpu(c, out, &out_gpu, err) < 0)
		return -1;
	if (stage_size(c, count, comm_dtype_size(t), (size_t)base->world_size, &all, err) < 0)
		return -1;
	blk = all / (size_t)base->world_size;
	if (!in_gpu) {
		/* all of in staged; a staged out is then this rank's block of it (NCCL's in-place
		 * form), which also covers out == in + rank * count */
		if (stage_reserve(c, all, err) < 0 || stage_in(c, 0, in, all, err) < 0)
			return -1;
		din = c->stage;
		if (!out_gpu) {
			out_at = (size_t)base->rank * blk;
			dout = (char *)c->stage + out_at;
		}
	} else if (!out_gpu) {
		if (stage_reserve(c, blk, err) < 0)
			return -1;
		dout = c->stage;
	}
	ncclComm_t nc = nccl_hold(c);
	if (!nc)
		return nccl_fail_abort(c, err);
	/* out == in + rank * count is NCCL's in-place form */
	ncclResult_t r = ncclReduceScatter(din, dout, count, nccl_type(t),
					   op == COMM_AVG ? ncclAvg : ncclSum, nc, c->stream);
	pthread_mutex_unlock(&c->lock);
	if (nccl_wait(c, "ncclReduceScatter", r, err) < 0)
		return -1;
	return out_gpu ? 0 : stage_out(c, out, out_at, blk, err);
}

static int nccl_allgather(struct comm *base, const void *in, void *out, size_t count,
			  enum comm_dtype t, struct dp_error *err)
{
	struct comm_nccl *c = (struct comm_nccl *)base;
	size_t blk, all = 0;
	int in_gpu, out_gpu;
	const void *din = in;
	void *dout = out;
	if (nccl_begin(c, "allgather", err) < 0)
		return -1;
	if (count == 0)
		return 0;
	if (nccl_on_gpu(c, in, &in_gpu, err) < 0 || nccl_on_gpu(c, out, &out_gpu, err) < 0)
		return -1;
	if (stage_size(c, count, comm_dtype_size(t), (size_t)base->world_size, &all, err) < 0)
		return -1;
	blk = all / (size_t)base->world_size;
	if (!out_gpu) {
		/* out staged whole; a staged in goes to this rank's block of it (NCCL's in-place
		 * form), copied before NCCL runs, which also covers in == out + rank * count */
		if (stage_reserve(c, all, err) < 0)
			return -1;
		dout = c->stage;
		if (!in_gpu) {
			size_t at = (size_t)base->rank * blk;
			if (stage_in(c, at, in, blk, err) < 0)
				return -1;
			din = (char *)c->stage + at;
		}
	} else if (!in_gpu) {
		if (stage_reserve(c, blk, err) < 0 || stage_in(c, 0, in, blk, err) < 0)
			return -1;
		din = c->stage;
	}
	ncclComm_t nc = nccl_hold(c);
	if (!nc)
		return nccl_fail_abort(c, err);
	/* in == out + rank * count is NCCL's in-place form */
	ncclResult_t r = ncclAllGather(din, dout, count, nccl_type(t), nc, c->stream);
	pthread_mutex_unlock(&c->lock);
	if (nccl_wait(c, "ncclAllGather", r, err) < 0)
		return -1;
	return out_gpu ? 0 : stage_out(c, out, 0, all, err);
}

static int nccl_broadcast(struct comm *base, void *buf, size_t bytes, int root,
			  struct dp_error *err)
{
	struct comm_nccl *c = (struct comm_nccl *)base;
	int w = base->world_size;
	if (nccl_begin(c, "broadcast", err) < 0)
		return -1;
	if (root < 0 || root >= w)
		return nccl_fail(c, err, "root %d is not a rank (0-%d)", root, w - 1);
	if (bytes == 0)
		return 0;
	int on_gpu, is_root = base->rank == root;
	void *d = buf;
	if (nccl_on_gpu(c, buf, &on_gpu, err) < 0)
		return -1;
	if (!on_gpu) {
		/* only the root's bytes are read, and only the others' are written */
		if (stage_reserve(c, bytes, err) < 0 ||
		    (is_root && stage_in(c, 0, buf, bytes, err) < 0))
			return -1;
		d = c->stage;
	}
	ncclComm_t nc = nccl_hold(c);
	if (!nc)
		return nccl_fail_abort(c, err);
	ncclResult_t r = ncclBroadcast(d, d, bytes, ncclUint8, root, nc, c->stream);
	pthread_mutex_unlock(&c->lock);
	if (nccl_wait(c, "ncclBroadcast", r, err) < 0)
		return -1;
	return on_gpu || is_root ? 0 : stage_out(c, buf, 0, bytes, err);
}

static int nccl_barrier(struct comm *base, struct dp_error *err)
{
	struct comm_nccl *c = (struct comm_nccl *)base;
	if (nccl_begin(c, "barrier", err) < 0)
		return -1;
	ncclComm_t nc = nccl_hold(c);
	if (!nc)
		return nccl_fail_abort(c, err);
	ncclResult_t r = ncclAllReduce(c->word, c->word, 1, ncclInt32, ncclSum, nc, c->stream);
	pthread_mutex_unlock(&c->lock);
	return nccl_wait(c, "ncclAllReduce", r, err);
}

static void nccl_abort(struct comm *base, const char *reason)
{
	struct comm_nccl *c = (struct comm_nccl *)base;
	pthread_mutex_lock(&c->lock);
	int first = !atomic_load(&c->aborted);
	if (first) {
		snprintf(c->abort_reason, sizeof(c->abort_reason), "%s", reason);
		atomic_store_explicit(&c->aborted, 1, memory_order_release);
	}
	pthread_mutex_unlock(&c->lock);
	if (!first)
		return;
	store_abort(c->st, reason); /* first: the others hear of it while NCCL tears down */
	nc_abort(c);
}

/* Finalize (flushes what was enqueued), then destroy; abort where that fails or hangs. */
static void nccl_destroy(struct comm *base)
{
	struct comm_nccl *c = (struct comm_nccl *)base;
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	if (c->nc && !c->failure.failed && !atomic_load(&c->aborted) &&
	    cudaSetDevice(c->device) == cudaSuccess) {
		/* finalize waits for the comm to be quiet; a peer that left without it must not
		 * hold the program's exit for long */
		double deadline = now_s() + (c->timeout_s < 30 ? c->timeout_s : 30);
		long ns = NCCL_SLEEP_MIN_NS;
		ncclResult_t r = ncclCommFinalize(c->nc), state = r;
		while (r == ncclSuccess || r == ncclInProgress) {
			r = ncclCommGetAsyncError(c->nc, &state);
			if (r != ncclSuccess || state != ncclInProgress)
				break;
			if (now_s() >= deadline || store_poll_abort(c->st, 0, NULL) == 1) {
				state = ncclInProgress;
				break;
			}
			nccl_sleep(&ns);
		}
		if (r == ncclSuccess && state == ncclSuccess &&
		    ncclCommDestroy(c->nc) == ncclSuccess)
			c->nc = NULL;
	}
	nc_abort_locked(c);
	pthread_mutex_unlock(&c->lock);
	if (c->word)
		cudaFree(c->word);
	if (c->stage)
		cudaFree(c->stage);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* DDP's gradient buckets: the NCCL stream waits for the event the backend recorded after the
 * kernels writing the bucket, so the reduction is queued at once and starts on the GPU as soon
 * as they end. Not an operation of its own (no sequence number, no timeout): the next one
 * carries those. */
static int nccl_after(struct comm *base, void *mark, struct dp_error *err)
{
	struct comm_nccl *c = (struct comm_nccl *)base;
	cudaError_t e;
	if (c->failure.failed)
		return errprintf(err, "%s", c->failure.msg.text);
	if (atomic_load_explicit(&c->aborted, memory_order_acquire))
		return nccl_fail_abort(c, err);
	if (!mark)
		return 0;
	if ((e = cudaSetDevice(c->device)) != cudaSuccess)
		return nccl_fail_cuda(c, "cudaSetDevice", e, err);
	if ((e = cudaStreamWaitEvent(c->stream, (cudaEvent_t)mark, 0)) != cudaSuccess)
		return nccl_fail_cuda(c, "cudaStreamWaitEvent", e, err);
	return 0;
}

static const struct comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .reduce_scatter = nccl_reduce_scatter,
    .allgather = nccl_allgather,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .after = nccl_after,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

/* ---------------------------------------------------------------------------------------
 * Creation. Every rank publishes its GPU ("host\ndevice\nPCI bus id", or "E" and why it has
 * none); rank 0 checks them all and publishes "I" + the NCCL unique id, or "E" + what is
 * wrong, so that every rank fails with the same message; then every rank joins the NCCL
 * communicator. */

static int cuda_failf(struct dp_error *err, const char *call, int device, cudaError_t e)
{
	return errprintf(err, "%s for GPU %d failed: %s (%s)", call, device, cudaGetErrorString(e),
			 cudaGetErrorName(e));
}

/* This rank's GPU, and the comm's stream and barrier word on it; info: its record. */
static int gpu_open(struct comm_nccl *c, char *info, size_t infolen, struct dp_error *err)
{
	char host[NCCL_HOST_MAX] = "", pci[NCCL_PCI_MAX] = "";
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess)
		return errprintf(err, "no GPU for NCCL: cudaGetDeviceCount: %s (%s)",
				 cudaGetErrorString(e), cudaGetErrorName(e));
	if (c->device < 0 || c->device >= n)
		return errprintf(err, "no GPU %d for NCCL: this rank sees %d GPU%s", c->device, n,
				 n == 1 ? "" : "s");
	if ((e = cudaSetDevice(c->device)) != cudaSuccess)
		return cuda_failf(err, "cudaSetDevice", c->device, e);
	if ((e = cudaDeviceGetPCIBusId(pci, sizeof(pci), c->device)) != cudaSuccess)
		return cuda_failf(err, "cudaDeviceGetPCIBusId", c->device, e);
	if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
		c->stream = NULL;
		return cuda_failf(err, "cudaStreamCreateWithFlags", c->device, e);
	}
	if ((e = cudaMalloc((void **)&c->word, sizeof(int))) != cudaSuccess) {
		c->word = NULL;
		return cuda_failf(err, "cudaMalloc", c->device, e);
	}
	if ((e = cudaMemsetAsync(c->word, 0, sizeof(int), c->stream)) != cudaSuccess)
		return cuda_failf(err, "cudaMemsetAsync", c->device, e);
	if ((e = cudaStreamSynchronize(c->stream)) != cudaSuccess)
		return cuda_failf(err, "cudaStreamSynchronize", c->device, e);
	if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
		snprintf(host, sizeof(host), "?");
	snprintf(info, infolen, "%s\n%d\n%s", host, c->device, pci);
	return 0;
}

struct gpu_rec {
	char host[NCCL_HOST_MAX], pci[NCCL_PCI_MAX];
	int device;
};

/* Whether this NCCL puts several ranks on one GPU (2.30 and later, asked to with
 * NCCL_MULTI_RANK_GPU_ENABLE=1); else why not, in why_not. */
static int nccl_multi_rank(char *why_not, size_t len)
{
	int v = 0;
	const char *on = getenv(ENV_NCCL_MULTI_RANK_GPU_ENABLE);
	if (ncclGetVersion(&v) != ncclSuccess)
		v = 0;
	if (v < 23000)
		snprintf(why_not, len,
			 "NCCL %d.%d.%d here puts several ranks on one GPU only from 2.30",
			 v / 10000, v / 100 % 100, v % 100);
	else if (!on || strcmp(on, "1") != 0)
		snprintf(why_not, len,
			 "NCCL %d.%d.%d here does so only with NCCL_MULTI_RANK_GPU_ENABLE=1",
			 v / 10000, v / 100 % 100, v % 100);
	else
		return 1;
	return 0;
}

/* Rank 0: every rank's GPU record; what is wrong in why if a rank has no GPU or two ranks
 * of a host share one. */
static int gpus_check(struct comm_nccl *c, long gen, struct dp_error *why)
{
	int w = c->base.world_size, rv = -1;
	/* ranks create their comms at about the same time: the creation's timeout, for all */
	double deadline = now_s() + c->timeout_s;
	struct gpu_rec *g = calloc((size_t)w, sizeof(*g));
	void *v = NULL;
	if (!g)
		return errprintf(why, "out of memory (%d GPU records)", w);
	for (int r = 0; r < w; r++) {
		char key[128], name[300];
		size_t len;
		snprintf(key, sizeof(key), "dptrain.nccl.gpu.%ld.%d", gen, r);
		store_rank_name(c->st, r, name, sizeof(name));
		free(v);
		v = NULL;
		double left = deadline - now_s();
		if (store_get(c->st, key, &v, &len, left > 0.1 ? left : 0.1, why) < 0) {
			errprefix(why, "%s did not say which GPU it uses", name);
			goto out;
		}
		const char *s = v;
		if (s[0] == 'E') {
			errprintf(why, "%s: %s", name, s + 1);
			goto out;
		}
		const char *nl1 = strchr(s, '\n'), *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
		if (!nl2) {
			errprintf(why, "%s published a bad GPU record under %s", name, key);
			goto out;
		}
		snprintf(g[r].host, sizeof(g[r].host), "%.*s", (int)(nl1 - s), s);
		g[r].device = atoi(nl1 + 1);
		snprintf(g[r].pci, sizeof(g[r].pci), "%s", nl2 + 1);
		for (int q = 0; q < r; q++) {
			if (strcmp(g[q].host, g[r].host) != 0 ||
			    strcasecmp(g[q].pci, g[r].pci) != 0)
				continue;
			/* allowed (device.allow_shared_gpu) and possible: NCCL shares it */
			char why_not[160] = "";
			if (c->share_gpu && nccl_multi_rank(why_not, sizeof(why_not)))
				continue;
			char also[300] = "";
			if (c->share_gpu)
				snprintf(also, sizeof(also),
					 "; device.allow_shared_gpu is set, but %s", why_not);
			const char *alt = c->share_gpu
					      ? ", or reduce through the CPU (DPTRAIN_GPU_COMM=cpu)"
					      : "";
			if (g[q].device == g[r].device)
				errprintf(
				    why,
				    "ranks %d and %d on %s both use GPU %d (PCI %s)%s; give each "
				    "rank its own GPU (srun --gpus-per-task=1)%s",
				    q, r, g[r].host, g[r].device, g[r].pci, also, alt);
			else
				errprintf(
				    why,
				    "ranks %d and %d on %s both use the GPU at PCI %s (their GPU "
				    "%d and %d)%s; give each rank its own GPU (srun "
				    "--gpus-per-task=1)%s",
				    q, r, g[r].host, g[r].pci, g[q].device, g[r].device, also, alt);
			goto out;
		}
	}
	rv = 0;
out:
	free(v);
	free(g);
	return rv;
}

/* Every rank: publishes its record (info, or why it has no GPU) and gets the unique id from
 * rank 0, or rank 0's message saying what is wrong. */
static int nccl_rendezvous(struct comm_nccl *c, const char *info, const char *why, ncclUniqueId *id,
			   struct dp_error *err)
{
	char key[128], rec[DP_ERROR_MAX + 2];
	unsigned char ans[1 + DP_ERROR_MAX];
	struct dp_error check;
	void *v = NULL;
	size_t len;
	long gen;
	int rank = c->base.rank, rv = -1;
	/* the comms this rank made before: the same count on every rank */
	snprintf(key, sizeof(key), "dptrain.nccl.created.%d", rank);
	if (store_add(c->st, key, 1, &gen, err) < 0)
		return -1;
	snprintf(key, sizeof(key), "dptrain.nccl.gpu.%ld.%d", gen, rank);
	snprintf(rec, sizeof(rec), "%s%s", info ? "" : "E", info ? info : why);
	if (store_set(c->st, key, rec, strlen(rec), err) < 0)
		return -1;
	snprintf(key, sizeof(key), "dptrain.nccl.id.%ld", gen);
	if (rank == 0) {
		ncclResult_t r;
		size_t n;
		ans[0] = 'E';
		if (gpus_check(c, gen, &check) < 0) {
			n = 1 +
			    (size_t)snprintf((char *)ans + 1, sizeof(ans) - 1, "%s", check.text);
		} else if ((r = ncclGetUniqueId(id)) != ncclSuccess) {
			errprintf(&check, "ncclGetUniqueId failed on rank 0: %s (%s)",
				  ncclGetErrorString(r), ncclGetLastError(NULL));
			n = 1 +
			    (size_t)snprintf((char *)ans + 1, sizeof(ans) - 1, "%s", check.text);
		} else {
			ans[0] = 'I';
			memcpy(ans + 1, id, sizeof(*id));
			n = 1 + sizeof(*id);
		}
		if (store_set(c->st, key, ans, n, err) < 0)
			return -1;
		if (ans[0] == 'E')
			return errprintf(err, "%s", (char *)ans + 1);
		return 0;
	}
	/* rank 0 answers when the last record is in, or after timeout_s without it */
	if (store_get(c->st, key, &v, &len, 2 * c->timeout_s + 10, err) < 0)
		return -1;
	const char *s = v;
	if (len >= 1 && s[0] == 'E')
		errprintf(err, "%s", s + 1);
	else if (len != 1 + sizeof(*id) || s[0] != 'I')
		errprintf(err, "rank 0 published a bad NCCL id under %s", key);
	else if (!info) /* rank 0 names it; here only if its record was not read */
		errprintf(err, "%s", why);
	else {
		memcpy(id, s + 1, sizeof(*id));
		rv = 0;
	}
	free(v);
	return rv;
}

/* ncclCommInitRankConfig, nonblocking, waited for like an operation. */
static int nccl_init(struct comm_nccl *c, ncclUniqueId id, struct dp_error *err)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	c->op = "NCCL init";
	c->t0 = now_s();
	pthread_mutex_lock(&c->lock);
	ncclResult_t r = ncclCommInitRankConfig(&c->nc, c->base.world_size, id, c->base.rank, &cfg);
	pthread_mutex_unlock(&c->lock);
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_fail_nccl(c, "ncclCommInitRankConfig", r, err);
	if (!c->nc)
		return nccl_fail(c, err, "ncclCommInitRankConfig made no communicator");
	/* done when the state leaves ncclInProgress; the stream is idle, so nccl_wait's
	 * look at it passes at once */
	return nccl_wait(c, "ncclCommInitRankConfig", r, err);
}

int comm_nccl_create(struct comm **out, struct store *st, const struct comm_nccl_opts *o,
		     struct dp_error *err)
{
	char info[NCCL_HOST_MAX + NCCL_PCI_MAX + 32];
	struct dp_error why = {""};
	ncclUniqueId id;
	int rv = -1;
	*out = NULL;
	struct comm_nccl *c = calloc(1, sizeof(*c));
	if (!c)
		return errprintf(err, "comm: out of memory");
	c->base.ops = &nccl_ops;
	c->base.rank = store_rank(st);
	c->base.world_size = store_world_size(st);
	c->st = st;
	c->device = o ? o->device : 0;
	c->share_gpu = o ? o->share_gpu : 0;
	c->timeout_s = o && o->timeout_s > 0 ? o->timeout_s : 300;
	/* the others time out within moments of each other: a short grace suffices */
	c->grace_s = c->timeout_s / 10 < 1 ? 1 : c->timeout_s / 10 > 10 ? 10 : c->timeout_s / 10;
	c->op = "comm";
	pthread_mutex_init(&c->lock, NULL);

	/* a rank without its GPU still takes part, so that rank 0 names it to everyone */
	int have_gpu = gpu_open(c, info, sizeof(info), &why) == 0;
	if (nccl_rendezvous(c, have_gpu ? info : NULL, why.text, &id, err) < 0 ||
	    nccl_init(c, id, err) < 0) {
		errprefix(err, "comm");
		goto out;
	}
	c->op = "comm";
	*out = &c->base;
	c = NULL;
	rv = 0;
out:
	if (c)
		nccl_destroy(&c->base);
	return rv;
}

#else /* no NCCL or no CUDA */

int comm_nccl_create(struct comm **out, struct store *st, const struct comm_nccl_opts *o,
		     struct dp_error *err)
{
	(void)st;
	(void)o;
	*out = NULL;
	return errprintf(
	    err, "comm: this build has no NCCL (build dptrain where the CUDA toolkit and NCCL "
		 "are installed, or use the CPU engine)");
}

#endif
