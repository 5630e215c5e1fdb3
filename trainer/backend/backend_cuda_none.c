/* backend_cuda_none.c — the CUDA backend's entry points in a build without the CUDA toolkit:
 * they say so, so that callers and tests need no #ifdef. Built always; empty with HAVE_CUDA
 * (trainer/backend/backend_cuda.cu defines them there). */
#include <stdio.h>

#include "common/error.h"
#include "trainer/backend/backend.h"
#include "trainer/backend/backend_cuda.h"

#ifndef HAVE_CUDA

#define NO_CUDA "this build has no CUDA backend (no toolkit at build time)"

struct backend *be_cuda_create(int device, const struct be_cuda_opts *o, struct dp_error *err)
{
	(void)device;
	(void)o;
	errprintf(err, NO_CUDA);
	return NULL;
}

void *be_cuda_stream(struct backend *be)
{
	(void)be;
	return NULL;
}

int be_cuda_device(struct backend *be)
{
	(void)be;
	return -1;
}

const char *be_cuda_bn_plan(struct backend *be, struct be_op *op)
{
	(void)be;
	(void)op;
	return "no CUDA backend";
}

int be_cuda_describe(int device, char *buf, size_t len)
{
	(void)device;
	snprintf(buf, len, NO_CUDA);
	return -1;
}

size_t be_cuda_peak_bytes(struct backend *be)
{
	(void)be;
	return 0;
}

size_t be_cuda_conv_shapes_timed(struct backend *be)
{
	(void)be;
	return 0;
}

int be_cuda_device_count(struct dp_error *err)
{
	errprintf(err, NO_CUDA);
	return 0;
}

#else

typedef int be_cuda_none_is_empty_with_cuda; /* ISO C forbids an empty translation unit */

#endif
