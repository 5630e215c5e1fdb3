/* backend_ref.h — private to trainer/backend/backend_*.c: the reference kernels (plain loops) that
 * the reference backend runs single-threaded and the CPU backend shares for its element-wise ops,
 * and the helpers both use for errors and memory. Layers must include backend.h only. */
#ifndef DPTRAIN_BACKEND_REF_H
#define DPTRAIN_BACKEND_REF_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "trainer/backend/backend.h"

/* Fills be->err (op name and shape first, then what failed) and returns -1. */
int be_errf(struct backend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "n=8 c=3 h=32 w=32 k=64 3x3/1 pad 1" and friends, for error messages. */
const char *be_conv_str(const struct be_conv_desc *d, char *buf, size_t len);
const char *be_bn_str(const struct be_bn_desc *d, char *buf, size_t len);
const char *be_pool_str(const struct be_pool_desc *d, char *buf, size_t len);
const char *be_linear_str(const struct be_linear_desc *d, char *buf, size_t len);

/* Shape checks shared by every backend's *_create; fill oh/ow. -1 with be->err set. */
int be_conv_check(struct backend *be, struct be_conv_desc *d);
int be_bn_check(struct backend *be, const struct be_bn_desc *d);
/* The residual (z, or dz in backward) is given exactly when the op fuses the add. */
int be_bn_z_check(struct backend *be, const struct be_bn_desc *d, const void *z, const char *fn);
int be_pool_check(struct backend *be, struct be_pool_desc *d);
int be_linear_check(struct backend *be, const struct be_linear_desc *d);

/* 64-byte aligned host memory (oneDNN's and AVX-512's preference). */
void *be_host_alloc(size_t bytes);
void be_host_free(void *p);
/* The op-table entries for host memory, shared by the CPU backends: alloc (NULL with be->err
 * set), free, and memcpy for to_host/from_host. */
void *be_host_op_alloc(struct backend *be, size_t bytes);
void be_host_op_free(struct backend *be, void *p);
int be_host_op_copy(struct backend *be, void *dst, const void *src, size_t bytes);

/* Kernels. par = 1 runs the outer loop on OpenMP threads with a static schedule; every
 * reduction is summed in a fixed order, so results do not depend on the thread count.
 * beta: 0 overwrites the output without reading it, otherwise out = result + beta * out. */
void be_ref_fill(float *x, float value, size_t n, int par);
/* backend.h's input_u8: NHWC bytes to normalised float32 NCHW. */
void be_ref_input_u8(const uint8_t *src, float *dst, int n, int c, int h, int w, const float *mean,
		     const float *std, int par);
void be_ref_relu_fwd(const float *x, float *y, size_t n, int par);
void be_ref_relu_bwd(const float *y, const float *dy, float *dx, size_t n, float beta, int par);
void be_ref_add(const float *a, const float *b, float *y, size_t n, int par);
void be_ref_axpby(float alpha, const float *x, float beta, float *y, size_t n, int par);
void be_ref_scale(float *y, float beta, size_t n, int par);
void be_ref_gap_fwd(const float *x, float *y, int n, int c, int hw, int par);
void be_ref_gap_bwd(const float *dy, float *dx, int n, int c, int hw, float beta, int par);
double be_ref_sumsq(const float *x, size_t n, int par);
int be_ref_xent(struct backend *be, const float *logits, const int32_t *labels, int n, int classes,
		float smoothing, float scale, float *loss, int *correct, float *dlogits, int par);

void be_ref_conv_fwd(const struct be_conv_desc *d, const float *x, const float *wgt,
		     const float *bias, float *y, int par);
void be_ref_conv_bwd_data(const struct be_conv_desc *d, const float *dy, const float *wgt,
			  float *dx, float beta, int par);
void be_ref_conv_bwd_weights(const struct be_conv_desc *d, const float *x, const float *dy,
			     float *dwgt, float *dbias, float beta, int par);
/* Max pool: the first maximum in scan order (row by row) wins, as in PyTorch's CPU kernel;
 * padding is -inf. Avg pool divides by kh*kw (count_include_pad=True). */
void be_ref_pool_fwd(const struct be_pool_desc *d, const float *x, float *y, int par);
void be_ref_pool_bwd(const struct be_pool_desc *d, const float *x, const float *dy, float *dx,
		     float beta, int par);

/* The reference ops with OpenMP: the CPU backend when built without oneDNN. */
struct backend *be_ref_create_parallel(int threads, struct dp_error *err);

#endif
