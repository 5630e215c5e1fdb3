/* backend_cuda_none.c — the CUDA backend's entry points in a build without the CUDA toolkit:
 * they say so, so that callers and tests need no #ifdef. Built always; empty with HAVE_CUDA
 * (trainer/backend_cuda.cu defines them there). */
#include <stdio.h>

#include "backend.h"
#include "backend_cuda.h"

#ifndef HAVE_CUDA

#define NO_CUDA "this build has no CUDA backend (no toolkit at build time)"

struct backend *be_cuda_create(int device, char *err, size_t errlen)
{
	(void)device;
	snprintf(err, errlen, NO_CUDA);
	return NULL;
}

int be_cuda_device_count(char *err, size_t errlen)
{
	snprintf(err, errlen, NO_CUDA);
	return 0;
}

#else

typedef int be_cuda_none_is_empty_with_cuda; /* ISO C forbids an empty translation unit */

#endif
