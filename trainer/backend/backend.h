/* backend.h — the op table every compute backend implements (cpu: oneDNN + OpenBLAS;
 * cuda: cuDNN + cuBLAS + own kernels). Layers call these ops and never a library directly.
 *
 * Two kinds of tensors cross the interface:
 * - Parameters, their gradients, BN running statistics and saved statistics: always plain
 *   float32 arrays (conv weights OIHW, linear weights [out][in]) inside the model's flat
 *   buffers. Mixed precision keeps these as the float32 master copy.
 * - Activations and activation gradients ("act" below): dense NCHW, or NHWC in the CUDA
 *   backend's half modes (rows [n][features] for 2-D ones, the same in both), with elements in
 *   the backend's activation type, be->act_dtype (be->act_size bytes each): float32 in the cpu
 *   and ref backends and the CUDA backend's fp32/tf32 modes, bfloat16 or IEEE half in its
 *   bf16/fp16 modes (each op then converts weights to that type on the fly and accumulates in
 *   float32). Layers size activation memory with act_size and never read activations directly:
 *   act_import/act_export convert from/to float32 NCHW. Element-wise ops see n elements of
 *   whatever layout; a flattened 4-D act keeps its layout (be_linear_desc says its shape).
 * The layout of acts is the backend's: only its ops and act_import/act_export know it (the CPU
 * backend keeps oneDNN's blocked layouts, the CUDA backend's half modes NHWC). */
#ifndef DPTRAIN_BACKEND_H
#define DPTRAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "common/error.h"

enum be_dtype { BE_F32 = 0, BE_BF16, BE_F16 };

struct backend;

/* Ops are planned once per shape (primitive creation, algorithm search, workspace sizing) and
 * reused; a layer keeps one op per batch size it has seen. */
struct be_op;

struct be_conv_desc {
	int n, c, h, w;	 /* input */
	int k, kh, kw;	 /* output channels, kernel */
	int stride, pad; /* same in both dimensions; groups = 1, dilation = 1 */
	int has_bias;
	int oh, ow; /* filled by conv_create */
};

struct be_bn_desc {
	int n, c, h, w;
	float eps;
	int fuse_relu; /* y = relu(bn(x)); backward masks dy with y > 0 */
	int fuse_add;  /* y = bn(x) + z (then relu if fuse_relu): ResNet's residual join */
};

enum be_pool_kind { BE_POOL_MAX, BE_POOL_AVG };

struct be_pool_desc {
	enum be_pool_kind kind;
	int n, c, h, w;
	int kh, kw, stride, pad; /* avg: padding excluded from the divisor? no: PyTorch's
				    count_include_pad=True default */
	int oh, ow;		 /* filled by pool_create */
};

struct be_linear_desc {
	int n, in, out;
	int has_bias;
	/* Where the input is a flattened c x h x w activation (in = c*h*w, h*w > 1): its shape,
	 * for backends whose activation layout orders the features otherwise (the weights stay
	 * [out][c][h][w]); all 0 for plain rows. */
	int c, h, w;
};

/* Every op returns 0 on success, -1 with be->err set (a message naming the op and shape).
 * beta: 0 overwrites the output (never reading it), 1 adds to it (gradient accumulation across
 * micro-steps and across the consumers of a tensor with fan-out); other values scale the old
 * output. Ops keep no data between calls (backward takes what it needs as arguments), so any
 * number of forwards may run between a forward and its backward. A backend is driven by one
 * thread at a time; its ops share scratch memory. */
struct backend_ops {
	const char *name;

	void *(*alloc)(struct backend *be, size_t bytes);
	void (*free)(struct backend *be, void *p);
	int (*to_host)(struct backend *be, void *dst, const void *src, size_t bytes);
	int (*from_host)(struct backend *be, void *dst, const void *src, size_t bytes);
	int (*fill)(struct backend *be, float *x, float value, size_t n);
	int (*sync)(struct backend *be);

	struct be_op *(*conv_create)(struct backend *be, struct be_conv_desc *d);
	int (*conv_fwd)(struct backend *be, struct be_op *op, const float *x, const float *wgt,
			const float *bias, float *y);
	int (*conv_bwd_data)(struct backend *be, struct be_op *op, const float *dy,
			     const float *wgt, float *dx, float beta);
	int (*conv_bwd_weights)(struct backend *be, struct be_op *op, const float *x,
				const float *dy, float *dwgt, float *dbias, float beta);

	struct be_op *(*bn_create)(struct backend *be, const struct be_bn_desc *d);
	/* Training: batch statistics; saves mean and inverse std (per channel) for backward;
	 * updates running stats as PyTorch: r = (1-momentum) r + momentum * stat, with the
	 * unbiased variance (n/(n-1)) in running_var. z: the residual (an act shaped like x)
	 * with fuse_add, else NULL. */
	int (*bn_fwd_train)(struct backend *be, struct be_op *op, const float *x, const float *z,
			    const float *gamma, const float *beta_, float *y, float *save_mean,
			    float *save_invstd, float *running_mean, float *running_var,
			    float momentum);
	int (*bn_fwd_infer)(struct backend *be, struct be_op *op, const float *x, const float *z,
			    const float *gamma, const float *beta_, const float *running_mean,
			    const float *running_var, float *y);
	/* y is the forward output (needed with fuse_relu). dx may be NULL: parameter gradients
	 * only. beta blends dx, dgamma and dbeta. With fuse_add, dz (never NULL) receives the
	 * gradient of z (dy, masked by y > 0 with fuse_relu), blended with bz. */
	int (*bn_bwd)(struct backend *be, struct be_op *op, const float *x, const float *y,
		      const float *dy, const float *gamma, const float *save_mean,
		      const float *save_invstd, float *dx, float *dz, float bz, float *dgamma,
		      float *dbeta, float beta);

	struct be_op *(*pool_create)(struct backend *be, struct be_pool_desc *d);
	int (*pool_fwd)(struct backend *be, struct be_op *op, const float *x, float *y);
	/* x and y are the forward's input and output (cuDNN needs both). Max pooling routes each
	 * dy to the first maximum of its window in x in scan order (row by row), as PyTorch's CPU
	 * kernel does, so ties go where PyTorch sends them. */
	int (*pool_bwd)(struct backend *be, struct be_op *op, const float *x, const float *y,
			const float *dy, float *dx, float beta);

	struct be_op *(*linear_create)(struct backend *be, const struct be_linear_desc *d);
	/* y[n][out] = x[n][in] . W[out][in]^T + b */
	int (*linear_fwd)(struct backend *be, struct be_op *op, const float *x, const float *wgt,
			  const float *bias, float *y);
	int (*linear_bwd_data)(struct backend *be, struct be_op *op, const float *dy,
			       const float *wgt, float *dx, float beta);
	int (*linear_bwd_weights)(struct backend *be, struct be_op *op, const float *x,
				  const float *dy, float *dwgt, float *dbias, float beta);

	void (*op_destroy)(struct backend *be, struct be_op *op);

	/* Element-wise over n elements of acts (relu, add) or of float32 arrays (axpby, fill,
	 * sumsq: parameters and gradients). relu_bwd uses the forward output y (y > 0). */
	int (*relu_fwd)(struct backend *be, const float *x, float *y, size_t n);
	int (*relu_bwd)(struct backend *be, const float *y, const float *dy, float *dx, size_t n,
			float beta);
	int (*add)(struct backend *be, const float *a, const float *b, float *y, size_t n);
	/* y = alpha * x + beta * y */
	int (*axpby)(struct backend *be, float alpha, const float *x, float beta, float *y,
		     size_t n);
	/* Global average pool: an act n x c x hw -> rows [n][c] (acts), and its backward. */
	int (*gap_fwd)(struct backend *be, const float *x, float *y, int n, int c, int hw);
	int (*gap_bwd)(struct backend *be, const float *dy, float *dx, int n, int c, int hw,
		       float beta);

	/* Softmax cross-entropy over logits[n][classes] (acts) with integer labels, optional label
	 * smoothing (PyTorch semantics). Writes the mean loss over the batch to *loss (host),
	 * the number of correct top-1 predictions to *correct (host), and, if dlogits is not
	 * NULL, d(mean loss * scale)/dlogits. Numerically stable (log-sum-exp). */
	int (*xent)(struct backend *be, const float *logits, const int32_t *labels, int n,
		    int classes, float smoothing, float scale, float *loss, int *correct,
		    float *dlogits);

	/* Sum of squares of x (host result), for gradient norms and NaN checks. */
	int (*sumsq)(struct backend *be, const float *x, size_t n, double *out);

	void (*destroy)(struct backend *be);

	/* Optional: NULL where activations are float32 (then an act is a float array). */

	/* Convert n x c x h x w values from a float32 NCHW array to an act (import: the input
	 * batch) and back (export: logits for evaluation, tests); both in backend memory. */
	int (*act_import)(struct backend *be, const float *x, void *y, int n, int c, int h, int w);
	int (*act_export)(struct backend *be, const void *x, float *y, int n, int c, int h, int w);
	/* g = dy + beta * g over n act elements (gradient fan-in at a residual add). */
	int (*act_accum)(struct backend *be, const void *dy, void *g, size_t n, float beta);

	/* Optional: NULL in backends whose memory is host memory (cpu, ref). */

	/* Page-locked host memory, for buffers copied to the backend often (input batches). */
	void *(*host_alloc)(struct backend *be, size_t bytes);
	void (*host_free)(struct backend *be, void *p);
	/* Copies bytes from host src to backend dst on a copy engine, concurrently with the
	 * work issued so far, which must not use dst (mark and mark_wait the last work that
	 * read it); work issued after it sees dst filled. Returns before the copy is done:
	 * *done is set to a marker of its end (mark_wait it before changing src). */
	int (*upload)(struct backend *be, void *dst, const void *src, size_t bytes, void **done);
	/* Markers in the backend's sequence of work: mark records one after everything issued
	 * so far (*ev is created on first use and reused); mark_wait blocks the calling thread,
	 * which may be another one, until that work is done; mark_free releases it. */
	int (*mark)(struct backend *be, void **ev);
	int (*mark_wait)(struct backend *be, void *ev);
	void (*mark_free)(struct backend *be, void *ev);
	/* Starts (on=1) or stops (on=0) the vendor profiler's capture range (ncu
	 * --profile-from-start off): DPTRAIN_PROFILE_STEP in dptrain(1). */
	int (*profile)(struct backend *be, int on);

	/* Optional. An input batch of n x h x w x c bytes (NHWC, decoded images as the loader
	 * hands them over) to float32 NCHW, both in backend memory: each value becomes
	 * ((float)v / 255 - mean[ch]) / std[ch] in float32 (ToTensor + Normalize; the
	 * loader's own arithmetic, bit for bit). A device backend is then sent a quarter of
	 * the bytes. c <= 4; mean and std are host arrays of c values. */
	int (*input_u8)(struct backend *be, const uint8_t *src, float *dst, int n, int c, int h,
			int w, const float *mean, const float *std);
};

struct backend {
	const struct backend_ops *ops;
	enum be_dtype act_dtype; /* element type of activations (see the top of this file) */
	size_t act_size;	 /* its size in bytes */
	int threads;		 /* CPU threads (0 = library default) */
	struct dp_error err;	 /* last error: names the op, shape and the library's message */
	void *priv;
};

/* Create the CPU backend (oneDNN where built with it, plain C otherwise). threads 0 = default
 * (OMP_NUM_THREADS, else all cores); it is set with omp_set_num_threads(), which OpenMP keeps
 * per thread: create the backend in the thread that runs its ops. NULL with *err on failure.
 * Activations are float32 in the layout oneDNN's convolutions take on this CPU (nChw16c,
 * nChw8c), kept from layer to layer. */
struct backend *be_cpu_create(int threads, struct dp_error *err);
struct be_cpu_opts {
	/* BE_F32 (0), or BE_BF16: activations, convolutions and matrix products in bfloat16
	 * (float32 accumulation, float32 master weights and gradients, BN statistics in
	 * float32), as PyTorch's CPU autocast; needs be_cpu_bf16(). */
	enum be_dtype act_dtype;
};
/* be_cpu_create with options (o NULL: the defaults). */
struct backend *be_cpu_create_opts(int threads, const struct be_cpu_opts *o, struct dp_error *err);
/* Whether this CPU computes bfloat16 in hardware for the CPU backend (AVX512_BF16 or AMX, at the
 * instruction set oneDNN runs): 1, or 0 with *why saying what it has instead. */
int be_cpu_bf16(struct dp_error *why);
/* What the CPU backend computes with, for logs and --devices: "oneDNN 2.6.3, avx512_core_vnni"
 * (the instruction set oneDNN dispatches to: the CPU's best, or less where ONEDNN_MAX_CPU_ISA
 * caps it; its kernels, and so the last bits of a result, differ between them), or "no oneDNN:
 * reference kernels". */
void be_cpu_describe(char *buf, size_t len);
/* The instruction-set level of the CPU backend's own kernels (batch norm, max pooling's
 * backward, global average pooling, layout and bfloat16 conversions): "avx512", "avx2" or
 * "base", following oneDNN's (so ONEDNN_MAX_CPU_ISA caps both); "reference" without oneDNN.
 * Every level computes the same values. */
const char *be_cpu_kernels(void);
/* The implementation that runs pass 0 (forward), 1 (backward by data) or 2 (backward by
 * weights) of a CPU backend's convolution op: oneDNN's ("jit_wino_4x3:avx512_core",
 * "jit:avx2") or dptrain's own Winograd ("dptrain_wino_4x3"), for tests and benchmarks; "" for
 * another backend's op, a pass without one, or no oneDNN. */
const char *be_cpu_conv_impl(struct backend *be, struct be_op *op, int pass);
/* Whose float32 Winograd convolutions (3x3 stride 1) run here: 2 oneDNN's (oneDNN 2 on
 * AVX-512, asked of a ResNet layer at the instruction set it runs), 1 dptrain's own
 * (backend_cpu_wino.c: where oneDNN has none and keeps float32 acts in blocks of 8 or 16
 * channels, as at AVX2 and with oneDNN 3.7 of Debian 13), 0 none (no oneDNN, or acts NCHW or
 * NHWC): every convolution is direct there. */
int be_cpu_winograd(void);
/* The reference backend: plain C loops, no library, single-threaded. Slow but obviously
 * right; the test suite checks the other backends against it and against PyTorch. */
struct backend *be_ref_create(struct dp_error *err);
/* How the CUDA backend computes. tf32: convolutions and matrix products of float32 tensors on
 * TF32 tensor cores (10-bit mantissa products, float32 sums; PyTorch's allow_tf32); 0 keeps
 * float32 FMA arithmetic, which agrees with the CPU backends to float32 rounding.
 * deterministic: only convolution algorithms that give the same bits every run (also turned on
 * by DPTRAIN_CUDA_DETERMINISTIC=1). */
struct be_cuda_opts {
	int tf32;
	int deterministic;
	/* BE_BF16 or BE_F16: activations, convolutions and matrix products in that type
	 * (float32 accumulation, float32 master weights, BN statistics in float32), as PyTorch's
	 * autocast, with activations NHWC (DPTRAIN_CUDA_LAYOUT=nchw keeps NCHW); BE_F32 (0):
	 * float32 NCHW activations, tf32 as above. */
	enum be_dtype act_dtype;
};

/* The CUDA backend on GPU `device` (cuDNN, cuBLAS, own kernels), o NULL for the defaults (both
 * 0); NULL with err where this build or machine has none. */
struct backend *be_cuda_create(int device, const struct be_cuda_opts *o, struct dp_error *err);

/* GPUs this process sees (after CUDA_VISIBLE_DEVICES): 0 with *err saying why where there is
 * none (no driver, no device, a build without CUDA), never negative. */
int be_cuda_device_count(struct dp_error *err);
/* One line about GPU `device`: name, memory, compute capability, PCI bus id (or why it could not
 * be read: -1). */
int be_cuda_describe(int device, char *buf, size_t len);
/* The most device memory a CUDA backend has held at once (its arena and cuDNN workspace). */
size_t be_cuda_peak_bytes(struct backend *be);
/* Convolution shapes whose algorithms the backend timed with cudnnFind (once a shape; 0 with
 * DPTRAIN_CUDA_CONV_FIND=0, deterministic, or no CUDA backend). */
size_t be_cuda_conv_shapes_timed(struct backend *be);

#endif
