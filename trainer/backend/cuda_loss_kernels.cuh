/* cuda_loss_kernels.cuh — the loss's kernel: softmax cross-entropy and its arg-max, a row a block;
 * included by cuda_loss.cu and run on the host by t/unit/kernels_host.cc. Device code only: no
 * library calls, no host state. */
#ifndef DPTRAIN_CUDA_LOSS_KERNELS_CUH
#define DPTRAIN_CUDA_LOSS_KERNELS_CUH

#include "trainer/backend/cuda_kernels.cuh"

/* Softmax cross-entropy of one row per block: the reference's formulas in double. Labels were
 * checked on the host. Writes the row's loss and hit; dlogits when not NULL. */
template <typename T>
__global__ static void k_xent_rows(const T *logits, const int32_t *labels, int n, int classes,
				   float smoothing, float scale, double *row_loss, int *row_hit,
				   T *dlogits)
{
	__shared__ float bv[CU_THREADS];
	__shared__ int bi[CU_THREADS];
	int r = blockIdx.x, t = threadIdx.x;
	const T *l = logits + (size_t)r * classes;
	int label = labels[r];
	float v = 0.0f, ll = ldf(l[label]); /* read before dlogits (which may be logits) */
	int a = -1;

	/* argmax, ties to the lowest index, as the reference's l[j] > l[arg] from arg 0: a NaN
	 * wins only at index 0 */
	for (int j = t; j < classes; j += CU_THREADS) {
		float lj = ldf(l[j]);
		if (lj == lj && (a < 0 || lj > v)) {
			v = lj;
			a = j;
		}
	}
	bv[t] = v;
	bi[t] = a;
	__syncthreads();
	for (int s = CU_THREADS / 2; s > 0; s >>= 1) {
		if (t < s) {
			int j = bi[t + s];
			if (j >= 0 &&
			    (bi[t] < 0 || bv[t + s] > bv[t] || (bv[t + s] == bv[t] && j < bi[t]))) {
				bv[t] = bv[t + s];
				bi[t] = j;
			}
		}
		__syncthreads();
	}
	int arg = bi[0] < 0 || isnan(ldf(l[0])) ? 0 : bi[0];
	double m = ldf(l[arg]), se = 0.0, slp = 0.0;
	for (int j = t; j < classes; j += CU_THREADS)
		se += exp((double)ldf(l[j]) - m);
	double lse = m + log(block_sum(se));
	for (int j = t; j < classes; j += CU_THREADS)
		slp += (double)ldf(l[j]) - lse;
	slp = block_sum(slp);
	/* smoothing / classes is a float division in the reference */
	float sc = smoothing / (float)classes;
	if (t == 0) {
		row_loss[r] = (1.0 - smoothing) * (lse - ll) - sc * slp;
		row_hit[r] = arg == label;
	}
	if (dlogits) {
		T *d = dlogits + (size_t)r * classes;
		double g = (double)scale / n;
		for (int j = t; j < classes; j += CU_THREADS) {
			double tj = sc + (j == label ? 1.0 - smoothing : 0.0);
			d[j] = to_act_d<T>((exp((double)ldf(l[j]) - lse) - tj) * g);
		}
	}
}

#endif
