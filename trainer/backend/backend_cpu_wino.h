/* backend_cpu_wino.h — private to backend_cpu.c: Winograd's F(4x4, 3x3) for float32 3x3
 * stride-1 convolutions of acts in oneDNN's blocked layouts (nChw8c, nChw16c), every pass, where
 * oneDNN has none of its own (AVX2; oneDNN 3's builds). The transforms are this file's loops;
 * the products of transformed tiles and weights are oneDNN's sgemm, 36 of them a batch of tiles.
 * backend_ref.c's convolution defines what each pass computes; Winograd's transforms round
 * more than a direct sum (t/unit/backend.c holds them to the reference within 1e-3). */
#ifndef DPTRAIN_BACKEND_CPU_WINO_H
#define DPTRAIN_BACKEND_CPU_WINO_H

#include <stddef.h>

#include "trainer/backend/backend.h"

/* One convolution's plan: n images of h x w, c channels in, k out, acts in blocks of bs
 * channels; output tiles of 4 x 4 pixels, th x tw an image. */
struct cpu_wino {
	int n, h, w, c, k, bs;
	int th, tw;
	size_t tiles;
	int chunk;   /* tiles a thread transforms and multiplies at once */
	int threads; /* OpenMP threads of the backend */
};

/* Plans d when it is a convolution these passes compute (3x3, stride 1, pad 1, no bias, channels
 * in whole blocks of bs = 8 or 16) and, unless forced, has enough images (more than 8, as
 * oneDNN's rule for its own) and tiles to pay: 0, else -1 and p untouched. */
int cpu_wino_plan(struct cpu_wino *p, const struct be_conv_desc *d, int bs, int threads, int force);

/* Floats of scratch each pass needs (the transformed weights and every thread's tiles). */
size_t cpu_wino_scratch(const struct cpu_wino *p);

/* backend.h's conv_fwd (y overwritten), conv_bwd_data (dx = result + beta * dx) and
 * conv_bwd_weights (dw, float32 OIHW, = result + beta * dw) on acts in p's layout. Return 0, or
 * -1 when oneDNN's sgemm failed (nothing else can). */
int cpu_wino_fwd(const struct cpu_wino *p, const float *x, const float *w, float *y,
		 float *scratch);
int cpu_wino_bwd_data(const struct cpu_wino *p, const float *dy, const float *w, float *dx,
		      float beta, float *scratch);
int cpu_wino_bwd_weights(const struct cpu_wino *p, const float *x, const float *dy, float *dw,
			 float beta, float *scratch);

#endif
