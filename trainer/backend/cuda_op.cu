/* cuda_op.cu — the CUDA backend's ops with a plan (convolution, batch norm, pooling, linear): the
 * opaque op each family's *_create makes (struct be_op, cuda_internal.h), the check that an op is
 * of the kind a function takes, its shape in messages, its cuDNN descriptors and their release.
 * Plans nothing: each family fills in its own part. */
#ifdef HAVE_CUDNN /* without cuDNN there is no CUDA backend (backend_cuda.cu) */

#include <stdlib.h>
#include <string.h>

#include "trainer/backend/cuda_internal.h"

/* " bf16" or " fp16" after a shape in messages, then " nhwc" in that layout; nothing in float32
 * mode. */
const char *dt_suffix(struct backend *be)
{
	const struct cu_ctx *ctx = ctx_of(be);

	if (ctx->dtype == BE_F32)
		return "";
	if (ctx->dtype == BE_BF16)
		return ctx->nhwc ? " bf16 nhwc" : " bf16";
	return ctx->nhwc ? " fp16 nhwc" : " fp16";
}

/* ---------------------------------------------------------------------------------------
 * Ops with a plan. */

struct be_op *op_new(struct backend *be, enum cu_kind kind, const char *fn)
{
	struct be_op *op = (struct be_op *)calloc(1, sizeof(*op));

	if (!op) {
		be_errf(be, "%s: out of memory", fn);
		return NULL;
	}
	op->kind = kind;
	return op;
}

/* A mismatched op is a caller bug that would otherwise read out of bounds. */
int op_is(struct backend *be, const struct be_op *op, enum cu_kind kind, const char *fn)
{
	if (op && op->kind == kind)
		return 1;
	be_errf(be, "%s: the op was not created by the matching *_create", fn);
	return 0;
}

void cu_op_destroy(struct backend *be, struct be_op *op)
{
	if (!op)
		return;
	arena_free(be, op->bn_bits);
	if (op->xd)
		cudnnDestroyTensorDescriptor(op->xd);
	if (op->yd)
		cudnnDestroyTensorDescriptor(op->yd);
	if (op->bd)
		cudnnDestroyTensorDescriptor(op->bd);
	if (op->wd)
		cudnnDestroyFilterDescriptor(op->wd);
	if (op->cd)
		cudnnDestroyConvolutionDescriptor(op->cd);
	if (op->ad)
		cudnnDestroyActivationDescriptor(op->ad);
	free(op);
}

/* A cuDNN descriptor of an n x c x h x w act: the backend's type and layout. */
int tensor4d(struct backend *be, cudnnTensorDescriptor_t *t, int n, int c, int h, int w,
	     const char *fn, const char *shape)
{
	DNN_RET(cudnnCreateTensorDescriptor(t));
	DNN_RET(cudnnSetTensor4dDescriptor(*t,
					   ctx_of(be)->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
					   dnn_type(ctx_of(be)->dtype), n, c, h, w));
	return 0;
}

/* op->shape: the shape string, then the activation type in half modes ("... pad 1 bf16"). */
const char *op_shape(struct backend *be, struct be_op *op)
{
	size_t len = strlen(op->shape);

	snprintf(op->shape + len, sizeof(op->shape) - len, "%s", dt_suffix(be));
	return op->shape;
}

#endif /* HAVE_CUDNN */
