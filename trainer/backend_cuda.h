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

#ifdef __cplusplus
}
#endif

#endif
