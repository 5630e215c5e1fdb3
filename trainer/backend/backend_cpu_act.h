/* backend_cpu_act.h — private to backend_cpu.c: the CPU backend's own kernels over the way it
 * stores activations (oneDNN's blocked layouts, NHWC or NCHW; float32 or bfloat16): batch norm,
 * max pooling's backward, global average pooling, the conversions from and to float32 NCHW and
 * the element-wise ops of bfloat16 acts. The reference kernels (backend_ref.c) define what each
 * computes; these index and round otherwise, and must not change a float32 result. */
#ifndef DPTRAIN_BACKEND_CPU_ACT_H
#define DPTRAIN_BACKEND_CPU_ACT_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/backend/backend.h"

#if defined(__x86_64__)
#define CPU_ACT_X86 1 /* the Makefile builds the AVX2 and AVX-512 levels too */
#else
#define CPU_ACT_X86 0
#endif

/* How n samples of a c x h x w activation are stored: in blocks of bs channels, element
 * (i, ch, s) (s = y * w + x) at ((i * c / bs + ch / bs) * hw + s) * bs + ch % bs. bs = 1 is
 * NCHW, 8 and 16 oneDNN's nChw8c and nChw16c, bs = c NHWC; c is a multiple of bs. */
struct cpu_act {
	int n, c, bs;
	size_t hw;
	int bf16; /* elements are bfloat16, else float32 */
};

/* bfloat16 from float32, rounded to nearest even (a NaN stays a NaN), as oneDNN rounds. */
static inline uint16_t cpu_bf16(float f)
{
	union {
		float f;
		uint32_t u;
	} v = {f};

	if ((v.u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((v.u >> 16) | 0x40);
	return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

static inline float cpu_f32(uint16_t b)
{
	union {
		uint32_t u;
		float f;
	} v = {(uint32_t)b << 16};

	return v.f;
}

/* Float32 NCHW to the act's storage and back (all of it, n samples). */
/* The kernels of one instruction-set level (backend_cpu_act.c, built once per level). */
struct cpu_act_kernels {
	void (*import)(const struct cpu_act *a, const float *x, void *y);
	void (*export_)(const struct cpu_act *a, const void *x, float *y);
	void (*bn_fwd)(const struct be_bn_desc *d, const struct cpu_act *a, const void *x,
		       const void *z, const float *gamma, const float *beta_, void *y,
		       float *save_mean, float *save_invstd, float *running_mean,
		       float *running_var, float momentum);
	void (*bn_bwd)(const struct be_bn_desc *d, const struct cpu_act *a, const void *x,
		       const void *y, const void *dy, const float *gamma, const float *save_mean,
		       const float *save_invstd, void *dx, void *dz, float bz, float *dgamma,
		       float *dbeta, float beta);
	void (*maxpool_bwd)(const struct be_pool_desc *d, int bs, int bf16, const void *x,
			    const void *dy, void *dx, float beta, float *scratch);
	void (*maxpool_fwd_nchw)(const struct be_pool_desc *d, const float *x, float *y);
	void (*gap_fwd)(const struct cpu_act *a, const void *x, void *y);
	void (*gap_bwd)(const struct cpu_act *a, const void *dy, void *dx, float beta);
	void (*bf16_relu_fwd)(const uint16_t *x, uint16_t *y, size_t n);
	void (*bf16_relu_bwd)(const uint16_t *y, const uint16_t *dy, uint16_t *dx, size_t n,
			      float beta);
	void (*bf16_add)(const uint16_t *a, const uint16_t *b, uint16_t *y, size_t n);
	void (*bf16_accum)(const uint16_t *dy, uint16_t *g, size_t n, float beta);
	void (*bf16_scale)(uint16_t *y, float beta, size_t n);
	void (*bf16_from_f32)(const float *x, uint16_t *y, size_t n);
	void (*bf16_to_f32)(const uint16_t *x, float *y, size_t n);
};
extern const struct cpu_act_kernels cpu_act_kernels_base;
#if CPU_ACT_X86
extern const struct cpu_act_kernels cpu_act_kernels_avx2, cpu_act_kernels_avx512;
#endif

/* The level the functions below run (backend_cpu_act_isa.c): "avx512" where oneDNN runs
 * AVX-512 (avx512_core or above, after ONEDNN_MAX_CPU_ISA), "avx2" where it runs AVX2, else
 * "base"; chosen when a CPU backend is created. cpu_act_use(NULL) chooses again from oneDNN;
 * cpu_act_use("base") etc. forces a level (the unit tests compare them). Returns the level's
 * name, or NULL (the level unchanged) for a level this build or this CPU lacks. */
const char *cpu_act_use(const char *level);
const char *cpu_act_level(void);

void cpu_act_import(const struct cpu_act *a, const float *x, void *y);
void cpu_act_export(const struct cpu_act *a, const void *x, float *y);

/* backend.h's batch norm over acts stored as a says (d's shape). Training when save_mean is
 * not NULL (batch statistics, saved and folded into the running ones), else inference from
 * running_mean and running_var. */
void cpu_act_bn_fwd(const struct be_bn_desc *d, const struct cpu_act *a, const void *x,
		    const void *z, const float *gamma, const float *beta_, void *y,
		    float *save_mean, float *save_invstd, float *running_mean, float *running_var,
		    float momentum);
void cpu_act_bn_bwd(const struct be_bn_desc *d, const struct cpu_act *a, const void *x,
		    const void *y, const void *dy, const float *gamma, const float *save_mean,
		    const float *save_invstd, void *dx, void *dz, float bz, float *dgamma,
		    float *dbeta, float beta);

/* Max pooling's backward (the first maximum of each window in scan order, as
 * be_ref_pool_bwd) with input and output stored in blocks of bs channels; bfloat16 sums in
 * scratch (d->n * d->c * d->h * d->w floats, NULL for float32) and rounds once. */
void cpu_act_maxpool_bwd(const struct be_pool_desc *d, int bs, int bf16, const void *x,
			 const void *dy, void *dx, float beta, float *scratch);

/* Global average pooling: an act as a says to rows [n][c] of the same type, and back. */
/* Max pooling's forward for float32 NCHW acts and pad 0 (windows inside the input). */
void cpu_act_maxpool_fwd_nchw(const struct be_pool_desc *d, const float *x, float *y);

void cpu_act_gap_fwd(const struct cpu_act *a, const void *x, void *y);
void cpu_act_gap_bwd(const struct cpu_act *a, const void *dy, void *dx, float beta);

/* Element-wise over n bfloat16 values, computed in float32 and rounded once: backend.h's
 * relu_fwd, relu_bwd, add and act_accum (g = dy + beta * g), a scale (y *= beta), and
 * conversions from and to float32. */
void cpu_bf16_relu_fwd(const uint16_t *x, uint16_t *y, size_t n);
void cpu_bf16_relu_bwd(const uint16_t *y, const uint16_t *dy, uint16_t *dx, size_t n, float beta);
void cpu_bf16_add(const uint16_t *a, const uint16_t *b, uint16_t *y, size_t n);
void cpu_bf16_accum(const uint16_t *dy, uint16_t *g, size_t n, float beta);
void cpu_bf16_scale(uint16_t *y, float beta, size_t n);
void cpu_bf16_from_f32(const float *x, uint16_t *y, size_t n);
void cpu_bf16_to_f32(const uint16_t *x, float *y, size_t n);

#endif
