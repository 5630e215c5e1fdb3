/* cuda_mem.cu — the CUDA backend's memory and the order of its streams: the caching arena over
 * cudaMalloc, the cuDNN workspace, copies and sync, page-locked host memory, uploads on the copy
 * stream, markers. Every device allocation of the backend is made here (teardown, in
 * backend_cuda.cu, frees what is left); no kernel, no op. */
#ifdef HAVE_CUDNN /* without cuDNN there is no CUDA backend (backend_cuda.cu) */

#include <stdlib.h>
#include <string.h>

#include "trainer/backend/cuda_internal.h"

/* ---------------------------------------------------------------------------------------
 * Memory: a caching arena. Sizes are rounded up to classes (at most 25% more than asked);
 * a freed block goes back to its class and is reused by the next request of that class. All
 * work runs in order on one stream, so a block freed while kernels still use it can be handed
 * out again at once: its next user's work queues behind theirs. */

static size_t size_class(size_t bytes)
{
	size_t top = 512, step;

	if (bytes <= top)
		return top;
	while (top < bytes)
		top <<= 1;
	step = top / 8; /* classes 5/8, 6/8, 7/8 and 8/8 of the next power of two */
	return (bytes + step - 1) / step * step;
}

/* Gives every unused block back to the driver (after the stream is done with them). */
static void arena_trim(struct cu_ctx *ctx)
{
	size_t j = 0;

	cudaStreamSynchronize(ctx->stream);
	for (size_t i = 0; i < ctx->nblocks; i++) {
		if (ctx->blocks[i].used)
			ctx->blocks[j++] = ctx->blocks[i];
		else {
			cudaFree(ctx->blocks[i].p);
			ctx->held -= ctx->blocks[i].size;
		}
	}
	ctx->nblocks = j;
}

/* cudaMalloc, trimming the arena once when the device is full. */
static cudaError_t dev_malloc(struct cu_ctx *ctx, void **p, size_t bytes)
{
	cudaError_t e = cudaMalloc(p, bytes);

	if (e == cudaErrorMemoryAllocation) {
		cudaGetLastError(); /* clear it */
		arena_trim(ctx);
		e = cudaMalloc(p, bytes);
	}
	if (e == cudaSuccess) {
		ctx->held += bytes;
		if (ctx->held > ctx->peak)
			ctx->peak = ctx->held;
	}
	return e;
}

void *arena_alloc(struct backend *be, size_t bytes, const char *fn)
{
	struct cu_ctx *ctx = ctx_of(be);
	size_t cls = size_class(bytes);
	void *p = NULL;
	cudaError_t e;

	for (size_t i = ctx->nblocks; i-- > 0;) {
		if (!ctx->blocks[i].used && ctx->blocks[i].size == cls) {
			ctx->blocks[i].used = 1;
			return ctx->blocks[i].p;
		}
	}
	if (ctx->nblocks == ctx->cap) {
		size_t ncap = ctx->cap ? 2 * ctx->cap : 64;
		struct cu_block *nb =
		    (struct cu_block *)realloc(ctx->blocks, ncap * sizeof(*ctx->blocks));
		if (!nb) {
			be_errf(be, "%s(%zu bytes): out of host memory for the block table", fn,
				bytes);
			return NULL;
		}
		ctx->blocks = nb;
		ctx->cap = ncap;
	}
	e = dev_malloc(ctx, &p, cls);
	if (e != cudaSuccess) {
		cudaGetLastError();
		be_errf(be, "%s(%zu bytes): cudaMalloc(%zu) on GPU %d: %s", fn, bytes, cls,
			ctx->device, cudaGetErrorString(e));
		return NULL;
	}
	ctx->blocks[ctx->nblocks].p = p;
	ctx->blocks[ctx->nblocks].size = cls;
	ctx->blocks[ctx->nblocks].used = 1;
	ctx->nblocks++;
	return p;
}

void arena_free(struct backend *be, void *p)
{
	struct cu_ctx *ctx = ctx_of(be);

	if (!p)
		return;
	for (size_t i = ctx->nblocks; i-- > 0;) {
		if (ctx->blocks[i].p == p) {
			ctx->blocks[i].used = 0;
			return;
		}
	}
	be_errf(be, "free(%p): not a block of this backend (ignored)", p);
}

/* The cuDNN workspace, grown to `bytes` (at most CU_WS_CAP: the algorithms are chosen so). */
void *ws_reserve(struct backend *be, size_t bytes, const char *fn, const char *shape)
{
	struct cu_ctx *ctx = ctx_of(be);
	void *p = NULL;
	cudaError_t e;

	if (bytes <= ctx->ws_bytes)
		return ctx->ws;
	e = cudaStreamSynchronize(ctx->stream); /* the old workspace may still be in use */
	if (e != cudaSuccess) {
		be_errf(be, "%s(%s): cudaStreamSynchronize before growing the cuDNN workspace: %s",
			fn, shape, cudaGetErrorString(e));
		return NULL;
	}
	cudaFree(ctx->ws);
	ctx->held -= ctx->ws_bytes;
	ctx->ws = NULL;
	ctx->ws_bytes = 0;
	e = dev_malloc(ctx, &p, bytes);
	if (e != cudaSuccess) {
		cudaGetLastError();
		be_errf(be, "%s(%s): cudaMalloc(%zu) for the cuDNN workspace: %s", fn, shape, bytes,
			cudaGetErrorString(e));
		return NULL;
	}
	ctx->ws = p;
	ctx->ws_bytes = bytes;
	return p;
}

/* Device memory outside the arena and the workspace, for a moment (the convolutions' algorithm
 * search at creation): NULL, with no error set, where the device has no room for it (the caller
 * does without). dev_scratch_free gives it back to the driver at once. */
void *dev_scratch(struct backend *be, size_t bytes)
{
	void *p = NULL;

	if (dev_malloc(ctx_of(be), &p, bytes) != cudaSuccess) {
		cudaGetLastError(); /* clear it */
		return NULL;
	}
	return p;
}

void dev_scratch_free(struct backend *be, void *p, size_t bytes)
{
	struct cu_ctx *ctx = ctx_of(be);

	if (!p)
		return;
	cudaStreamSynchronize(ctx->stream);
	cudaFree(p);
	ctx->held -= bytes;
}

static void *cu_alloc(struct backend *be, size_t bytes)
{
	return arena_alloc(be, bytes, "alloc");
}

static void cu_free(struct backend *be, void *p)
{
	arena_free(be, p);
}

/* Copies in either direction (unified addressing tells which), finished on return: the host
 * buffer may be reused at once and errors of earlier kernels show up here. */
static int cu_copy(struct backend *be, const char *fn, void *dst, const void *src, size_t bytes)
{
	char shape[48];

	snprintf(shape, sizeof(shape), "%zu bytes", bytes);
	if (!bytes)
		return 0;
	CU_RET(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx_of(be)->stream));
	CU_RET(cudaStreamSynchronize(ctx_of(be)->stream));
	return 0;
}

static int cu_to_host(struct backend *be, void *dst, const void *src, size_t bytes)
{
	return cu_copy(be, "to_host", dst, src, bytes);
}

static int cu_from_host(struct backend *be, void *dst, const void *src, size_t bytes)
{
	return cu_copy(be, "from_host", dst, src, bytes);
}

static int cu_sync(struct backend *be)
{
	const char *fn = "sync", *shape = "";

	CU_RET(cudaStreamSynchronize(ctx_of(be)->stream));
	CU_RET(cudaGetLastError());
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * Pinned memory, uploads on a copy stream, markers (cudaEvent). */

static void *cu_host_alloc(struct backend *be, size_t bytes)
{
	void *p = NULL;
	cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);

	if (e != cudaSuccess) {
		cudaGetLastError();
		be_errf(be, "host_alloc(%zu bytes): cudaHostAlloc: %s", bytes,
			cudaGetErrorString(e));
		return NULL;
	}
	return p;
}

static void cu_host_free(struct backend *be, void *p)
{
	(void)be;
	if (p)
		cudaFreeHost(p);
}

/* Records *ev (created on first use, then reused) after the work given to stream so far. */
static int record_on(struct backend *be, cudaStream_t stream, void **ev, const char *fn,
		     const char *shape)
{
	if (!*ev) {
		cudaEvent_t e;
		CU_RET(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
		*ev = (void *)e;
	}
	CU_RET(cudaEventRecord((cudaEvent_t)*ev, stream));
	return 0;
}

static int cu_mark(struct backend *be, void **ev)
{
	return record_on(be, ctx_of(be)->stream, ev, "mark", "");
}

/* From any thread: the event's device is the backend's, whichever is current here. */
static int cu_mark_wait(struct backend *be, void *ev)
{
	const char *fn = "mark_wait", *shape = "";

	if (!ev)
		return 0;
	CU_RET(cudaSetDevice(ctx_of(be)->device)); /* for a thread that never chose one */
	CU_RET(cudaEventSynchronize((cudaEvent_t)ev));
	return 0;
}

static void cu_mark_free(struct backend *be, void *ev)
{
	(void)be;
	if (ev)
		cudaEventDestroy((cudaEvent_t)ev);
}

/* The copy runs on ctx->copy after what that stream was given before; the compute stream waits
 * for its end (an event) before anything issued later, so the copy overlaps the compute issued
 * earlier. Nothing orders it after that compute: dst must not be in use by it (the trainer
 * alternates two buffers and waits for a mark after the last work reading one). */
static int cu_upload(struct backend *be, void *dst, const void *src, size_t bytes, void **done)
{
	const char *fn = "upload";
	char shape[48];
	struct cu_ctx *ctx = ctx_of(be);

	snprintf(shape, sizeof(shape), "%zu bytes", bytes);
	if (!ctx->copy)
		CU_RET(cudaStreamCreateWithFlags(&ctx->copy, cudaStreamNonBlocking));
	if (bytes)
		CU_RET(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->copy));
	if (record_on(be, ctx->copy, done, fn, shape) < 0)
		return -1;
	CU_RET(cudaStreamWaitEvent(ctx->stream, (cudaEvent_t)*done, 0));
	return 0;
}

/* The op table's memory, copy and marker slots. */
void cu_mem_register(struct backend_ops *o)
{
	o->alloc = cu_alloc;
	o->free = cu_free;
	o->to_host = cu_to_host;
	o->from_host = cu_from_host;
	o->sync = cu_sync;
	o->host_alloc = cu_host_alloc;
	o->host_free = cu_host_free;
	o->upload = cu_upload;
	o->mark = cu_mark;
	o->mark_wait = cu_mark_wait;
	o->mark_free = cu_mark_free;
}

#endif /* HAVE_CUDNN */
