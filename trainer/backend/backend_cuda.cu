/* backend_cuda.cu — the CUDA backend: cuDNN for convolution and batch norm, cuBLAS for linear
 * layers, own kernels for batch norm in bf16, pooling, element-wise ops, global average pool,
 * cross-entropy and sums; one stream on one GPU, memory from a caching arena over cudaMalloc.
 * Activations in float32, bfloat16 or half (be_cuda_opts.act_dtype), NCHW in float32 and NHWC in
 * the half modes (DPTRAIN_CUDA_LAYOUT), float32 parameters. This file: device setup and teardown,
 * the op table, backend_cuda.h's functions; the ops are in the family files cuda_*.cu
 * (cuda_internal.h lists them). Must not change the op semantics backend_ref.c defines:
 * t/unit/backend_cuda.c compares them op by op. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

extern "C" {
#include "common/error.h"
#include "common/env.h"
#include "trainer/backend/backend.h"
#include "trainer/backend/backend_cuda.h"
#include "trainer/backend/backend_ref.h"
}

#ifndef HAVE_CUDNN

/* The toolkit without cuDNN: nothing to run convolutions with. */
extern "C" struct backend *be_cuda_create(int device, const struct be_cuda_opts *o,
					  struct dp_error *err)
{
	(void)device;
	(void)o;
	errprintf(err, "this build has no CUDA backend (cuDNN was missing at build time)");
	return NULL;
}

extern "C" void *be_cuda_stream(struct backend *be)
{
	(void)be;
	return NULL;
}

extern "C" int be_cuda_device(struct backend *be)
{
	(void)be;
	return -1;
}

extern "C" const char *be_cuda_bn_plan(struct backend *be, struct be_op *op)
{
	(void)be;
	(void)op;
	return "no CUDA backend";
}

extern "C" int be_cuda_describe(int device, char *buf, size_t len)
{
	(void)device;
	snprintf(buf, len, "this build has no CUDA backend (cuDNN was missing at build time)");
	return -1;
}

extern "C" size_t be_cuda_peak_bytes(struct backend *be)
{
	(void)be;
	return 0;
}

extern "C" size_t be_cuda_conv_shapes_timed(struct backend *be)
{
	(void)be;
	return 0;
}

extern "C" int be_cuda_device_count(struct dp_error *err)
{
	errprintf(err, "this build has no CUDA backend (cuDNN was missing at build time)");
	return 0;
}

#else

#include "trainer/backend/cuda_internal.h"

/* Numerics. By default convolutions run with CUDNN_FMA_MATH and cuBLAS with CUBLAS_DEFAULT_MATH,
 * which for float32 means no TF32 tensor cores: results agree with the CPU backends to float32
 * rounding. With be_cuda_opts.tf32 both may use TF32 tensor cores (cuDNN's default math and
 * CUBLAS_TF32_TENSOR_OP_MATH), as PyTorch does with allow_tf32.
 * Own kernels accumulate in double and write with __fadd_rn/__fmul_rn where the reference
 * computes in float (no FMA contraction), so element-wise ops match it bit for bit.
 *
 * Half modes (be_cuda_opts.act_dtype BE_BF16 or BE_F16), PyTorch's autocast done by hand:
 * activations are stored in the half type, everything else stays float32. Own kernels are the
 * float32 ones with loads widened to float and one rounding to nearest even on the store.
 * Convolutions are cuDNN's with half data and filters and float32 compute (its PSEUDO_HALF and
 * PSEUDO_BFLOAT16 configurations), tensor cores allowed; each call first casts the float32
 * weights into a half copy in scratch (they change every step: nothing to cache). The weight
 * gradient comes out of cuDNN in the half type into scratch and is widened into the float32
 * gradient. Linear layers are cublasGemmEx with half A and B and float32 compute (reductions in
 * float32 too); their weight gradient is written in float32 directly. Batch norm has half x and y
 * and float32 parameters and statistics: cuDNN's in fp16, own kernels in bf16 (cuda_bn.cu says
 * why). Nothing is clamped: an fp16 overflow is inf, and the trainer's loss scaling (sumsq of the
 * float32 gradients) skips that step.
 *
 * Layout. In the half modes activations are NHWC ("channels last"), where tensor cores and
 * cuDNN's fast half kernels want them (PyTorch's channels_last with autocast does the same);
 * DPTRAIN_CUDA_LAYOUT=nchw at creation keeps NCHW there (benchmarks, and tests comparing the
 * two). Float32 modes are always NCHW: cuDNN's float32 kernels gain nothing from NHWC, and their
 * tests compare with the CPU bit for bit. Nothing outside this backend sees the layout: act_import
 * and act_export transpose from and to float32 NCHW, and weights stay float32 OIHW ([out][in]
 * with the input's features in c, h, w order for linear layers): the per-call half copy is
 * permuted to what the NHWC data needs (OHWI filters; [out][h][w][c] for a linear layer fed a
 * flattened c x h x w act) and the gradients permuted back. Own kernels keep their arithmetic,
 * only their indexing changes (the layout helpers in cuda_kernels.cuh). Batch norm training in
 * fp16 NHWC runs cuDNN's persistent NHWC kernels (cudnnBatchNormalizationForwardTrainingEx,
 * CUDNN_BATCHNORM_SPATIAL_PERSISTENT), the ReLU and the residual add fused into them where cuDNN
 * can (see cu_bn_create). In bf16 NHWC a batch norm
 * of a multiple of 64 channels runs the own kernels' vector versions (8 channels a thread, 16
 * bytes a load); DPTRAIN_CUDA_BN_VEC=0 at creation keeps the scalar ones (to compare). With a
 * ReLU, their training forward also keeps the mask as bits (a byte per 8 channels of a row), which
 * the backward reads instead of y (2 bytes an element): the same gradient bit for bit, a sixteenth
 * of the traffic; DPTRAIN_CUDA_BN_BITS=0 reads y (to compare).
 * t/unit/kernels_host.cc runs the own kernels on the host (t/unit/cuda_emu.h), on any machine.
 *
 * Determinism. Own kernels (batch norm's too: fixed-order sums, no atomics) and cuBLAS give the
 * same bits for the same inputs on the same GPU.
 * cuDNN's convolution algorithms are chosen once per shape by timing them (cudnnFind*Ex, as
 * PyTorch's cudnn.benchmark does; DPTRAIN_CUDA_CONV_FIND=0 keeps its heuristics alone, to
 * compare), so two runs may differ in the last bits; DPTRAIN_CUDA_DETERMINISTIC=1 at creation
 * restricts them to deterministic ones chosen by the heuristics alone (cudnnGet*Algorithm_v7, no
 * timing), which the bit-exact resume test needs on a GPU. */

/* ---------------------------------------------------------------------------------------
 * The backend. */

static void cu_destroy(struct backend *be)
{
	struct cu_ctx *ctx;

	if (!be)
		return;
	ctx = ctx_of(be);
	if (ctx) {
		if (ctx->stream)
			cudaStreamSynchronize(ctx->stream);
		for (size_t i = 0; i < ctx->nblocks; i++)
			cudaFree(ctx->blocks[i].p);
		free(ctx->blocks);
		free(ctx->picks);
		cudaFree(ctx->ws);
		if (ctx->blas)
			cublasDestroy(ctx->blas);
		if (ctx->dnn)
			cudnnDestroy(ctx->dnn);
		if (ctx->stream)
			cudaStreamDestroy(ctx->stream);
		if (ctx->copy) {
			cudaStreamSynchronize(ctx->copy);
			cudaStreamDestroy(ctx->copy);
		}
		free(ctx);
	}
	free(be);
}

static int cu_profile(struct backend *be, int on)
{
	const char *fn = on ? "profile start" : "profile stop", *shape = "";

	CU_RET(cudaStreamSynchronize(ctx_of(be)->stream));
	CU_RET(on ? cudaProfilerStart() : cudaProfilerStop());
	return 0;
}

/* The op table, filled by each family's cu_*_register (cuda_internal.h): a new op adds its line
 * there, not here. Float32 mode leaves act_import, act_export and act_accum NULL: an act is then a
 * float array, and nn.c uses its input batch and axpby directly instead of copies. */
static struct backend_ops cu_make_ops(int half)
{
	struct backend_ops o = {};

	o.name = "cuda";
	cu_mem_register(&o);
	cu_eltwise_register(&o);
	cu_conv_register(&o);
	cu_bn_register(&o);
	cu_pool_register(&o);
	cu_linear_register(&o);
	cu_loss_register(&o);
	o.op_destroy = cu_op_destroy;
	o.destroy = cu_destroy;
	o.profile = cu_profile;
	if (!half)
		o.act_import = NULL, o.act_export = NULL, o.act_accum = NULL;
	return o;
}

/* The float32 modes' table and the half modes', each built once, on first use (C++ initialises a
 * function's statics once, thread-safely), and never changed after. */
static const struct backend_ops *cu_ops(int half)
{
	static const struct backend_ops f32 = cu_make_ops(0), h16 = cu_make_ops(1);

	return half ? &h16 : &f32;
}

static int is_cuda(const struct backend *be)
{
	return be && (be->ops == cu_ops(0) || be->ops == cu_ops(1));
}

extern "C" void *be_cuda_stream(struct backend *be)
{
	return is_cuda(be) ? (void *)ctx_of(be)->stream : NULL;
}

extern "C" int be_cuda_device(struct backend *be)
{
	return is_cuda(be) ? ctx_of(be)->device : -1;
}

extern "C" const char *be_cuda_bn_plan(struct backend *be, struct be_op *op)
{
	if (!is_cuda(be) || !op || op->kind != CU_BN)
		return "not a batch norm of a CUDA backend";
	if (op->bn_own)
		return "own kernels";
	if (!op->bn_ex)
		return "cuDNN plain calls";
	switch (op->bn_ops) {
	case CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION:
		return op->bn_bwd_ex ? "cuDNN Ex BN_ADD_ACTIVATION"
				     : "cuDNN Ex BN_ADD_ACTIVATION (plain backward)";
	case CUDNN_BATCHNORM_OPS_BN_ACTIVATION:
		return op->bn_bwd_ex ? "cuDNN Ex BN_ACTIVATION"
				     : "cuDNN Ex BN_ACTIVATION (plain backward)";
	default:
		return op->bn_bwd_ex ? "cuDNN Ex BN" : "cuDNN Ex BN (plain backward)";
	}
}

extern "C" size_t be_cuda_peak_bytes(struct backend *be)
{
	return is_cuda(be) ? ctx_of(be)->peak : 0;
}

extern "C" size_t be_cuda_conv_shapes_timed(struct backend *be)
{
	return is_cuda(be) ? ctx_of(be)->npicks : 0;
}

extern "C" int be_cuda_describe(int device, char *buf, size_t len)
{
	cudaDeviceProp p;
	char pci[64] = "?";
	cudaError_t e = cudaGetDeviceProperties(&p, device);

	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(buf, len, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
		return -1;
	}
	if (cudaDeviceGetPCIBusId(pci, sizeof(pci), device) != cudaSuccess)
		cudaGetLastError();
	snprintf(buf, len, "%s, %.1f GiB, compute capability %d.%d, PCI %s", p.name,
		 (double)p.totalGlobalMem / (1 << 30), p.major, p.minor, pci);
	return 0;
}

extern "C" int be_cuda_device_count(struct dp_error *err)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);

	if (e != cudaSuccess) {
		cudaGetLastError();
		errprintf(err, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
		return 0;
	}
	if (count <= 0) {
		errprintf(err, "cudaGetDeviceCount found no GPU");
		return 0;
	}
	return count;
}

extern "C" struct backend *be_cuda_create(int device, const struct be_cuda_opts *o,
					  struct dp_error *err)
{
	struct backend *be = NULL;
	struct cu_ctx *ctx = NULL;
	const char *det = getenv(ENV_DPTRAIN_CUDA_DETERMINISTIC);
	const char *cvd = getenv(ENV_CUDA_VISIBLE_DEVICES);
	const char *layout = getenv(ENV_DPTRAIN_CUDA_LAYOUT);
	const char *bn_vec = getenv(ENV_DPTRAIN_CUDA_BN_VEC);
	const char *find = getenv(ENV_DPTRAIN_CUDA_CONV_FIND);
	const char *bn_bits = getenv(ENV_DPTRAIN_CUDA_BN_BITS);
	enum be_dtype dt = o ? o->act_dtype : BE_F32;
	int count;
	cudaError_t e;
	cudnnStatus_t ds;
	cublasStatus_t bs;
	cublasMath_t bm;

	if (dt != BE_F32 && dt != BE_BF16 && dt != BE_F16) {
		errprintf(err,
			  "cuda backend: act_dtype %d is not BE_F32, BE_BF16 or BE_F16 (a caller "
			  "bug)",
			  (int)dt);
		return NULL;
	}
	if (layout && *layout && strcmp(layout, "nchw") != 0 && strcmp(layout, "nhwc") != 0) {
		errprintf(
		    err,
		    "cuda backend: DPTRAIN_CUDA_LAYOUT=%s: expected nchw or nhwc (the bf16/fp16 "
		    "modes' activation layout; unset or empty: nhwc)",
		    layout);
		return NULL;
	}
	count = be_cuda_device_count(err);
	if (count <= 0) {
		errprefix(err, "cuda backend: no CUDA GPU visible");
		return NULL;
	}
	if (device < 0 || device >= count) {
		errprintf(err,
			  "cuda backend: GPU %d does not exist: this process sees %d "
			  "(CUDA_VISIBLE_DEVICES=%s)",
			  device, count, cvd ? cvd : "(unset)");
		return NULL;
	}
	be = (struct backend *)calloc(1, sizeof(*be));
	ctx = (struct cu_ctx *)calloc(1, sizeof(*ctx));
	if (!be || !ctx) {
		errprintf(err, "cuda backend: out of memory");
		free(be);
		free(ctx);
		return NULL;
	}
	be->ops = cu_ops(dt != BE_F32);
	be->priv = ctx;
	be->threads = 0;
	be->act_dtype = dt;
	be->act_size = dt == BE_F32 ? sizeof(float) : sizeof(bf16);
	ctx->device = device;
	ctx->deterministic = (det && strcmp(det, "1") == 0) || (o && o->deterministic);
	ctx->tf32 = o && o->tf32;
	ctx->dtype = dt;
	/* DPTRAIN_CUDA_BN_VEC=0: the scalar kernels everywhere (to compare the two) */
	ctx->bn_vec = !(bn_vec && strcmp(bn_vec, "0") == 0);
	/* DPTRAIN_CUDA_BN_BITS=0: the vector kernels' backward reads y for the ReLU's mask */
	ctx->bn_bits = !(bn_bits && strcmp(bn_bits, "0") == 0);
	/* DPTRAIN_CUDA_CONV_FIND=0: cuDNN's heuristics alone; deterministic: always (a timed
	 * choice may differ between runs, and with it the bits) */
	ctx->conv_find = !ctx->deterministic && !(find && strcmp(find, "0") == 0);
	/* float32 modes are NCHW whatever the variable says (see the top of this file) */
	ctx->nhwc = dt != BE_F32 && !(layout && strcmp(layout, "nchw") == 0);
#define CREATE_TRY(ok, call, str)                                                                  \
	do {                                                                                       \
		if (!(ok)) {                                                                       \
			errprintf(err, "cuda backend on GPU %d: %s: %s", device, call, str);       \
			goto fail;                                                                 \
		}                                                                                  \
	} while (0)
	e = cudaSetDevice(device);
	CREATE_TRY(e == cudaSuccess, "cudaSetDevice", cudaGetErrorString(e));
	e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
	CREATE_TRY(e == cudaSuccess, "cudaStreamCreate", cudaGetErrorString(e));
	/* own batch norm kernels (bf16): one wave of their partial kernels */
	if (dt == BE_BF16 && cu_bn_wave(device, ctx->bn_vec, &ctx->bn_wave, err) < 0)
		goto fail;
	ds = cudnnCreate(&ctx->dnn);
	CREATE_TRY(ds == CUDNN_STATUS_SUCCESS, "cudnnCreate", cudnnGetErrorString(ds));
	ds = cudnnSetStream(ctx->dnn, ctx->stream);
	CREATE_TRY(ds == CUDNN_STATUS_SUCCESS, "cudnnSetStream", cudnnGetErrorString(ds));
	bs = cublasCreate(&ctx->blas);
	CREATE_TRY(bs == CUBLAS_STATUS_SUCCESS, "cublasCreate", cublasGetStatusString(bs));
	bs = cublasSetStream(ctx->blas, ctx->stream);
	CREATE_TRY(bs == CUBLAS_STATUS_SUCCESS, "cublasSetStream", cublasGetStatusString(bs));
	/* Float32 sgemm in float32 (no TF32) like the CPU backends, unless TF32 is asked for. Half
	 * modes: tensor cores (the default for half GemmEx), and split-K reductions in float32,
	 * not in the half output type. */
	if (dt != BE_F32)
		bm = (cublasMath_t)(CUBLAS_DEFAULT_MATH |
				    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
	else
		bm = ctx->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
	bs = cublasSetMathMode(ctx->blas, bm);
	CREATE_TRY(bs == CUBLAS_STATUS_SUCCESS, "cublasSetMathMode", cublasGetStatusString(bs));
#undef CREATE_TRY
	return be;
fail:
	cudaGetLastError();
	cu_destroy(be);
	return NULL;
}

#endif /* HAVE_CUDNN */
