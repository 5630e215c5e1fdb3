/* backend_cuda.h — private to trainer/backend/backend_cuda*.{cu,c}, the CUDA optimizer
 * (trainer/optim/optim_cuda.cu, which runs on the backend's stream) and their tests: what the CUDA
 * backend offers them besides backend.h. Every other file includes backend.h only
 * (contrib/ci/check-layers). The backend's own files share cuda_internal.h besides. */
#ifndef DPTRAIN_BACKEND_CUDA_H
#define DPTRAIN_BACKEND_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The stream every op of this CUDA backend runs on (a cudaStream_t), for kernels of other
 * files that must run in order with them (trainer/optim/optim_cuda.cu). */
void *be_cuda_stream(struct backend *be);
/* The GPU of this CUDA backend. */
int be_cuda_device(struct backend *be);
/* How a batch-norm op of this backend trains, for the tests' diagnostics: "own kernels",
 * "cuDNN plain calls", or "cuDNN Ex <ops>", with " (plain backward)" where BackwardEx is not
 * used. The plan can step down at a call cuDNN refuses. */
const char *be_cuda_bn_plan(struct backend *be, struct be_op *op);

#ifdef __cplusplus
}
#endif

#endif
