/* comm_staged_cuda.c — CUDA's copies for the staged comm (comm_staged.c): device memory told by
 * cudaPointerGetAttributes, copied with cudaMemcpy on the rank's GPU (made current in the calling
 * thread first), through a pinned host buffer. Without CUDA, a message. */
#define _GNU_SOURCE
#include "trainer/dist/comm.h"
#include "common/error.h"

#include <stdlib.h>

#if defined(HAVE_CUDA)

#include <cuda_runtime.h>

struct cuda_stage {
	int device;
};

static int cuda_is_device(void *ctx, const void *p)
{
	(void)ctx;
	struct cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		cudaGetLastError(); /* a plain host pointer on old runtimes: not sticky */
		return 0;
	}
	return a.type == cudaMemoryTypeDevice;
}

static int cuda_copy(void *ctx, void *dst, const void *src, size_t bytes, int to_dev,
		     struct dp_error *err)
{
	struct cuda_stage *c = ctx;
	cudaError_t e = cudaSetDevice(c->device);
	if (e == cudaSuccess)
		e = cudaMemcpy(dst, src, bytes,
			       to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
	if (e != cudaSuccess)
		return errprintf(err, "GPU %d: %s (%s)", c->device, cudaGetErrorString(e),
				 cudaGetErrorName(e));
	return 0;
}

static void *cuda_host_alloc(void *ctx, size_t bytes)
{
	struct cuda_stage *c = ctx;
	void *p = NULL;
	if (cudaSetDevice(c->device) != cudaSuccess ||
	    cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
		cudaGetLastError();
		return NULL;
	}
	return p;
}

static void cuda_host_free(void *ctx, void *p)
{
	(void)ctx;
	cudaFreeHost(p);
}

int comm_staged_cuda(struct comm **out, struct comm *inner, int device, struct dp_error *err)
{
	struct cuda_stage *c = malloc(sizeof(*c));
	if (!c) {
		*out = NULL;
		inner->ops->destroy(inner);
		return errprintf(err, "comm: out of memory");
	}
	c->device = device;
	struct comm_stage st = {.ctx = c,
				.is_device = cuda_is_device,
				.copy = cuda_copy,
				.host_alloc = cuda_host_alloc,
				.host_free = cuda_host_free,
				.owns_ctx = 1};
	return comm_staged_create(out, inner, &st, err);
}

#else

int comm_staged_cuda(struct comm **out, struct comm *inner, int device, struct dp_error *err)
{
	(void)device;
	*out = NULL;
	inner->ops->destroy(inner);
	return errprintf(err, "comm: this build has no CUDA: no GPU buffers to stage");
}

#endif
