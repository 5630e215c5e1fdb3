/* backend_cuda.h — private to trainer/backend_cuda*.{cu,c} and their test: what the CUDA backend
 * offers besides be_cuda_create (declared in backend.h). Layers must include backend.h only. */
#ifndef DPTRAIN_BACKEND_CUDA_H
#define DPTRAIN_BACKEND_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* GPUs this process sees (after CUDA_VISIBLE_DEVICES): 0 with *err saying why where there is
 * none (no driver, no device, a build without CUDA), never negative. */
int be_cuda_device_count(char *err, size_t errlen);

/* The stream every op of this CUDA backend runs on (a cudaStream_t), for kernels of other
 * files that must run in order with them (trainer/optim_cuda.cu). */
void *be_cuda_stream(struct backend *be);
/* The GPU of this CUDA backend. */
int be_cuda_device(struct backend *be);
/* One line about GPU `device`: name, memory, compute capability, PCI bus id (or why it could not
 * be read: -1). */
int be_cuda_describe(int device, char *buf, size_t len);
/* The most device memory this backend has held at once (its arena and cuDNN workspace). */
size_t be_cuda_peak_bytes(struct backend *be);

#ifdef __cplusplus
}
#endif

#endif
