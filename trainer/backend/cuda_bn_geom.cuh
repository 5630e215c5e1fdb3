/* cuda_bn_geom.cuh — the grid of batch norm's own kernels: their constants, and the shape and
 * grid that bn_create plans (bn_geom_plan, cuda_bn.cu), the op keeps (struct be_op,
 * cuda_internal.h) and the kernels walk (cuda_bn_kernels.cuh, which says how). No kernel: any
 * file of the backend may include it. */
#ifndef DPTRAIN_CUDA_BN_GEOM_CUH
#define DPTRAIN_CUDA_BN_GEOM_CUH

#include <stddef.h>

extern "C" {
#include "trainer/backend/backend.h"
}

#include "trainer/backend/cuda_kernels.cuh"

#define BN_CB	  32 /* NHWC: channels per block of the partial and apply kernels */
#define BN_LANES  32 /* threads per channel in the final kernels */
#define BN_UNROLL 4  /* rows a thread loads before it uses the first: loads in flight */
/* The vector kernels (the _v ones): NHWC 2-byte acts, a multiple of BN_VCB channels, 16-byte
 * aligned tensors. A thread takes BN_VEC consecutive channels of a row, one 16-byte load per
 * tensor and row where the scalar kernels make 8 of 2 bytes (a warp moved 64 bytes a load
 * there: the kernels were bound by loads in flight, not by bandwidth). */
#define BN_VEC	     8	/* channels a thread loads at once */
#define BN_VCB	     64 /* channels per block: BN_VCB / BN_VEC threads per row */
#define BN_VUNROLL   2	/* rows in flight per thread (each row up to 5 loads of 16 bytes) */
#define BN_SLABS_MAX 1024
#define BN_ROWS_MIN  16

/* One batch norm's shape and its kernels' grid (cuda_bn.cu plans it at bn_create). */
struct bn_geom {
	size_t rows;	  /* m = N*H*W values per channel */
	size_t hw;	  /* pixels per sample */
	size_t slab_rows; /* rows per slab; the last one may have fewer */
	int chans;
	int nhwc;
	int vec;		/* the vector kernels' grid (BN_VCB channels a block) */
	unsigned chunks, slabs; /* the grid of the partial and apply kernels */
};

/* The grid for a shape: channel chunks x slabs of rows, the slabs as many as fill about one wave
 * of the GPU (`wave` blocks at once) with at least BN_ROWS_MIN rows per thread, at most
 * BN_SLABS_MAX. The order of the sums follows from the shape and this grid: the same bits every
 * run on one GPU model (another may differ in the last bits, as cuDNN's algorithms do). vec:
 * the vector kernels' grid (the caller checks that they apply). */
static inline void bn_geom_plan(const struct be_bn_desc *d, int nhwc, int vec, unsigned wave,
				struct bn_geom *g)
{
	size_t cb = !nhwc ? 1 : vec ? BN_VCB : BN_CB;
	size_t rb = CU_THREADS / (vec ? BN_VCB / BN_VEC : cb), slabs, most;

	g->rows = (size_t)d->n * d->h * d->w;
	g->hw = (size_t)d->h * d->w;
	g->chans = d->c;
	g->nhwc = nhwc;
	g->vec = vec;
	g->chunks = (unsigned)(((size_t)d->c + cb - 1) / cb);
	slabs = wave / g->chunks;
	most = (g->rows + rb * BN_ROWS_MIN - 1) / (rb * BN_ROWS_MIN);
	if (slabs > most)
		slabs = most;
	if (slabs > BN_SLABS_MAX)
		slabs = BN_SLABS_MAX;
	if (slabs < 1)
		slabs = 1;
	g->slab_rows = (g->rows + slabs - 1) / slabs;
	g->slabs = (unsigned)((g->rows + g->slab_rows - 1) / g->slab_rows);
}

#endif
