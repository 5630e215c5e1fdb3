/* cuda_loss.cu — the CUDA backend's loss: softmax cross-entropy over logits with label
 * smoothing, its gradient and top-1 hits (cuda_loss_kernels.cuh), summed on the host in row order
 * as the reference does. Nothing else. */
#ifdef HAVE_CUDNN /* without cuDNN there is no CUDA backend (backend_cuda.cu) */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/backend/cuda_internal.h"
#include "trainer/backend/cuda_loss_kernels.cuh"

/* Whether p is device (or managed) memory; host memory otherwise. */
static int is_device_ptr(const void *p)
{
	cudaPointerAttributes a;

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		cudaGetLastError(); /* older drivers fail on plain host memory */
		return 0;
	}
	return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* Per-row results come back to the host and are summed there in row order, as the reference
 * does. Labels may be in device or host memory: they are read on the host first to give the
 * reference's message for a label out of range. */
template <typename T>
static int xent_t(struct backend *be, const float *logits, const int32_t *labels, int n,
		  int classes, float smoothing, float scale, float *loss, int *correct,
		  float *dlogits)
{
	const char *fn = "xent";
	char shape[64];
	struct cu_ctx *ctx = ctx_of(be);
	int32_t *hl = NULL;
	double *hloss = NULL;
	int *hhit = NULL;
	char *scratch = NULL;
	double *dloss;
	int *dhit;
	int32_t *dlab;
	const int32_t *lab;
	double total = 0.0;
	int hits = 0, rv = -1, on_dev;

	snprintf(shape, sizeof(shape), "n=%d classes=%d%s", n, classes, dt_suffix(be));
	if (n <= 0 || classes <= 0 || !(smoothing >= 0.0f && smoothing <= 1.0f)) {
		be_errf(be,
			"xent(n=%d classes=%d smoothing=%g): n and classes must be positive, "
			"smoothing in [0, 1]",
			n, classes, smoothing);
		goto out;
	}
	hl = (int32_t *)malloc(sizeof(*hl) * n);
	hloss = (double *)malloc(sizeof(*hloss) * n);
	hhit = (int *)malloc(sizeof(*hhit) * n);
	if (!hl || !hloss || !hhit) {
		be_errf(be, "xent(%s): out of host memory", shape);
		goto out;
	}
	on_dev = is_device_ptr(labels);
	if (on_dev) {
		CU_TRY(cudaMemcpyAsync(hl, labels, sizeof(*hl) * n, cudaMemcpyDeviceToHost,
				       ctx->stream));
		CU_TRY(cudaStreamSynchronize(ctx->stream));
	} else {
		memcpy(hl, labels, sizeof(*hl) * n);
	}
	for (int i = 0; i < n; i++) {
		if (hl[i] < 0 || hl[i] >= classes) {
			be_errf(be,
				"xent(n=%d classes=%d): label %d of sample %d is outside [0, %d)",
				n, classes, (int)hl[i], i, classes);
			goto out;
		}
	}
	scratch = (char *)arena_alloc(be, (sizeof(double) + sizeof(int) + sizeof(int32_t)) * n, fn);
	if (!scratch)
		goto out;
	dloss = (double *)scratch;
	dhit = (int *)(dloss + n);
	dlab = (int32_t *)(dhit + n);
	lab = labels;
	if (!on_dev) {
		CU_TRY(cudaMemcpyAsync(dlab, hl, sizeof(*hl) * n, cudaMemcpyHostToDevice,
				       ctx->stream));
		lab = dlab;
	}
	k_xent_rows<T><<<n, CU_THREADS, 0, ctx->stream>>>(
	    (const T *)logits, lab, n, classes, smoothing, scale, dloss, dhit, (T *)dlogits);
	CU_TRY(cudaGetLastError());
	CU_TRY(
	    cudaMemcpyAsync(hloss, dloss, sizeof(*hloss) * n, cudaMemcpyDeviceToHost, ctx->stream));
	CU_TRY(cudaMemcpyAsync(hhit, dhit, sizeof(*hhit) * n, cudaMemcpyDeviceToHost, ctx->stream));
	CU_TRY(cudaStreamSynchronize(ctx->stream));
	for (int i = 0; i < n; i++) {
		total += hloss[i];
		hits += hhit[i];
	}
	*loss = (float)(total / n);
	*correct = hits;
	rv = 0;
out:
	if (scratch)
		arena_free(be, scratch);
	free(hl);
	free(hloss);
	free(hhit);
	return rv;
}

static int cu_xent(struct backend *be, const float *logits, const int32_t *labels, int n,
		   int classes, float smoothing, float scale, float *loss, int *correct,
		   float *dlogits)
{
	return ACT_CALL(be, xent_t, be, logits, labels, n, classes, smoothing, scale, loss, correct,
			dlogits);
}

/* The op table's loss slots. */
void cu_loss_register(struct backend_ops *o)
{
	o->xent = cu_xent;
}

#endif /* HAVE_CUDNN */
