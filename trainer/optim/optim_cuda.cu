/* optim_cuda.cu — optim_gpu.h on the CUDA backend: SGD, AdamW and LAMB as fused kernels over a
 * table of chunks of the shard's segments, the optimizer state in the backend's device memory.
 * Mirrors trainer/optim/optim.c operation for operation and must not change its arithmetic
 * (t/unit/optim_gpu.c compares the two); knows nothing of ranks or collectives. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "common/error.h"
#include "trainer/backend/backend.h"
#include "trainer/backend/backend_cuda.h"
#include "trainer/optim/optim.h"
#include "trainer/optim/optim_gpu.h"
}

/* Numerics. Every float operation that optim.c does in float is written with __fmul_rn,
 * __fadd_rn, __fsub_rn, __fdiv_rn and __fsqrt_rn in optim.c's order: nvcc would otherwise fuse
 * a*b+c into one FMA (optim.c is built with -ffp-contract=off), and the results would differ
 * in the last bit. The constants are formed on the host in double exactly as optim.c forms
 * them and passed rounded to float. Sums of squares run in double: per thread in element
 * order, per block in a fixed tree, per chunk into an array that the host adds up in chunk
 * order; no floating-point atomics, so two runs give the same bits. They differ from optim.c's
 * sums only in the order of double additions, far below the float rounding of the norms.
 *
 * Work. The shard's part of every segment is cut into chunks of at most OG_CHUNK elements
 * (create builds the table once); a pass over all parameters is one launch with one block per
 * chunk. Elements between segments (padding) are in no chunk, so they are never touched. */

#define OG_THREADS 256
#define OG_CHUNK   16384 /* elements per chunk: 64 per thread */

/* One block's work: count elements of segment seg from element start of the flat buffers. */
struct og_chunk {
	size_t start;
	unsigned count;
	int seg;
	int decay; /* the segment's decay flag (weight decay applies when also wd != 0) */
};

struct optim_gpu {
	struct backend *be;
	cudaStream_t stream;
	enum optim_kind kind;
	size_t total, lo, hi; /* the shape of the struct optim it was made for */
	int nsegs, nstate;
	size_t nparams;		  /* elements the shard's segments cover, for messages */
	struct og_chunk *hchunks; /* host copy: which segment each chunk's sums belong to */
	struct og_chunk *chunks;  /* device */
	int nchunks;
	float *state[OPTIM_MAX_STATE]; /* device, hi - lo floats each, as o->state[k].data */
	double *partial;	       /* device: 2 sums per chunk */
	double *hpartial;	       /* page-locked host copy of partial */
	float *ratio;		       /* LAMB, device: the trust-scaled rate of each segment */
	float *hratio;		       /* LAMB, page-locked host copy of ratio */
	cudaEvent_t ratio_sent;	       /* LAMB: the last upload of hratio has read it */
};

/* ---------------------------------------------------------------------------------------
 * Kernels. blockIdx.x is the chunk; state arrays are indexed by element - lo. */

struct og_sgd {
	float wd, momentum, damp1, neg_lr; /* damp1 = 1 - dampening */
	int wd_on, use_momentum, first, nesterov;
};

struct og_adam {
	float b1, c1, b2, c2, eps; /* c = 1 - b */
	float decay, bc2_sqrt, neg_step_size;
	int wd_on;
};

struct og_lamb {
	float b1, c1, b2, c2, eps;
	float bc1, bc2, wd, clip;
	int wd_on;
};

/* Sums over the OG_THREADS threads of a block in a fixed tree; thread 0 gets the results. */
__device__ static void block_sum2(double *a, double *b)
{
	__shared__ double sa[OG_THREADS], sb[OG_THREADS];
	unsigned t = threadIdx.x;

	sa[t] = *a;
	sb[t] = *b;
	__syncthreads();
	for (unsigned s = OG_THREADS / 2; s > 0; s >>= 1) {
		if (t < s) {
			sa[t] = __dadd_rn(sa[t], sa[t + s]);
			sb[t] = __dadd_rn(sb[t], sb[t + s]);
		}
		__syncthreads();
	}
	*a = sa[0];
	*b = sb[0];
}

/* x*x of a float is exact in double, so this equals optim.c's acc += (double)x * x. */
__device__ static double add_sq(double acc, float x)
{
	return __dadd_rn(acc, __dmul_rn((double)x, (double)x));
}

__global__ static void k_sgd(const struct og_chunk *chunks, float *p, const float *g, float *buf,
			     size_t lo, struct og_sgd c)
{
	const struct og_chunk ch = chunks[blockIdx.x];
	const int use_wd = ch.decay && c.wd_on;

	for (unsigned j = threadIdx.x; j < ch.count; j += OG_THREADS) {
		size_t i = ch.start + j;
		float pi = p[i];
		float d = use_wd ? __fadd_rn(g[i], __fmul_rn(c.wd, pi)) : g[i];
		if (c.use_momentum) {
			float b = c.first ? d
					  : __fadd_rn(__fmul_rn(buf[i - lo], c.momentum),
						      __fmul_rn(c.damp1, d));
			buf[i - lo] = b;
			d = c.nesterov ? __fadd_rn(d, __fmul_rn(c.momentum, b)) : b;
		}
		p[i] = __fadd_rn(pi, __fmul_rn(c.neg_lr, d));
	}
}

__global__ static void k_adamw(const struct og_chunk *chunks, float *p, const float *g, float *m,
			       float *v, size_t lo, struct og_adam c)
{
	const struct og_chunk ch = chunks[blockIdx.x];
	const int use_wd = ch.decay && c.wd_on;

	for (unsigned j = threadIdx.x; j < ch.count; j += OG_THREADS) {
		size_t i = ch.start + j, s = i - lo;
		float gi = g[i];
		float pi = use_wd ? __fmul_rn(p[i], c.decay) : p[i];
		float mi = __fadd_rn(__fmul_rn(m[s], c.b1), __fmul_rn(c.c1, gi));
		float vi = __fadd_rn(__fmul_rn(v[s], c.b2), __fmul_rn(__fmul_rn(c.c2, gi), gi));
		m[s] = mi;
		v[s] = vi;
		float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bc2_sqrt), c.eps);
		p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(c.neg_step_size, mi), denom));
	}
}

/* optim.c's lamb_u: the update direction of one element. */
__device__ static float lamb_u(float m, float v, float p, const struct og_lamb &c, int use_wd)
{
	float u = __fdiv_rn(__fdiv_rn(m, c.bc1), __fadd_rn(__fsqrt_rn(__fdiv_rn(v, c.bc2)), c.eps));
	return use_wd ? __fadd_rn(u, __fmul_rn(c.wd, p)) : u;
}

/* The moments, and the chunk's sums of p^2 and u^2 into partial[2 * chunk + 0/1]. */
__global__ static void k_lamb_prepare(const struct og_chunk *chunks, const float *p, const float *g,
				      float *m, float *v, size_t lo, struct og_lamb c,
				      double *partial)
{
	const struct og_chunk ch = chunks[blockIdx.x];
	const int use_wd = ch.decay && c.wd_on;
	double psq = 0.0, usq = 0.0;

	for (unsigned j = threadIdx.x; j < ch.count; j += OG_THREADS) {
		size_t i = ch.start + j, s = i - lo;
		float gi = c.clip != 1.0f ? __fdiv_rn(g[i], c.clip) : g[i];
		float mi = __fadd_rn(__fmul_rn(m[s], c.b1), __fmul_rn(c.c1, gi));
		float vi = __fadd_rn(__fmul_rn(v[s], c.b2), __fmul_rn(__fmul_rn(c.c2, gi), gi));
		m[s] = mi;
		v[s] = vi;
		float pi = p[i];
		psq = add_sq(psq, pi);
		usq = add_sq(usq, lamb_u(mi, vi, pi, c, use_wd));
	}
	block_sum2(&psq, &usq);
	if (threadIdx.x == 0) {
		partial[2 * (size_t)blockIdx.x] = psq;
		partial[2 * (size_t)blockIdx.x + 1] = usq;
	}
}

__global__ static void k_lamb_apply(const struct og_chunk *chunks, float *p, const float *m,
				    const float *v, size_t lo, struct og_lamb c, const float *ratio)
{
	const struct og_chunk ch = chunks[blockIdx.x];
	const int use_wd = ch.decay && c.wd_on;
	const float r = ratio[ch.seg];

	for (unsigned j = threadIdx.x; j < ch.count; j += OG_THREADS) {
		size_t i = ch.start + j, s = i - lo;
		float pi = p[i];
		p[i] = __fsub_rn(pi, __fmul_rn(r, lamb_u(m[s], v[s], pi, c, use_wd)));
	}
}

/* The chunk's sum of x^2 into partial[chunk]. */
__global__ static void k_sumsq(const struct og_chunk *chunks, const float *x, double *partial)
{
	const struct og_chunk ch = chunks[blockIdx.x];
	double sq = 0.0, none = 0.0;

	for (unsigned j = threadIdx.x; j < ch.count; j += OG_THREADS)
		sq = add_sq(sq, x[ch.start + j]);
	block_sum2(&sq, &none);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = sq;
}

/* ---------------------------------------------------------------------------------------
 * Host side: constants as optim.c forms them, launches, copies. */

static const char *kind_title(enum optim_kind k)
{
	switch (k) {
	case OPTIM_SGD:
		return "SGD";
	case OPTIM_ADAMW:
		return "AdamW";
	case OPTIM_LAMB:
		return "LAMB";
	}
	return "unknown optimizer";
}

/* "fn (AdamW, 123 parameters): call: error"; call is cut at its argument list. Clears the
 * error so that the next launch check sees its own. */
static int og_fail(const struct optim_gpu *g, const char *fn, struct dp_error *err,
		   const char *call, cudaError_t e)
{
	cudaGetLastError();
	errprintf(err, "%s (%s, %zu parameters): %.*s: %s", fn, kind_title(g->kind), g->nparams,
		  (int)strcspn(call, "("), call, cudaGetErrorString(e));
	return -1;
}

/* In functions with g, fn and err: fail with -1 and a message naming the call. */
#define OG_CHECK(call)                                                                             \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess)                                                             \
			return og_fail(g, fn, err, #call, e_);                                     \
	} while (0)
/* One pass over all chunks on the backend's stream (none when the shard has no parameters).
 * Errors while the kernel runs show up at the next synchronising call. */
#define OG_LAUNCH(kernel, ...)                                                                     \
	do {                                                                                       \
		if (g->nchunks > 0) {                                                              \
			kernel<<<(unsigned)g->nchunks, OG_THREADS, 0, g->stream>>>(__VA_ARGS__);   \
			cudaError_t e_ = cudaGetLastError();                                       \
			if (e_ != cudaSuccess)                                                     \
				return og_fail(g, fn, err, "launching " #kernel, e_);              \
		}                                                                                  \
	} while (0)

/* A struct optim other than the one g was made for would index past g's buffers. */
static int check_shape(const struct optim_gpu *g, const struct optim *o, const char *fn,
		       struct dp_error *err)
{
	if (o->p.kind == g->kind && o->total == g->total && o->lo == g->lo && o->hi == g->hi &&
	    o->nsegs == g->nsegs && o->nstate == g->nstate)
		return 0;
	errprintf(err,
		  "%s (%s, %zu parameters): called with an optimizer (%s, shard [%zu, %zu) of %zu "
		  "floats, %d segments) other than the one it was created for (shard [%zu, %zu) "
		  "of %zu floats, %d segments); this is a bug in the caller, please report it",
		  fn, kind_title(g->kind), g->nparams, kind_title(o->p.kind), o->lo, o->hi,
		  o->total, o->nsegs, g->lo, g->hi, g->total, g->nsegs);
	return -1;
}

/* The part [a, b) of segment s inside the shard [lo, hi); 0 if there is none (optim.c's
 * seg_piece). */
static int seg_piece(const struct optim *o, const struct optim_segment *s, size_t *a, size_t *b)
{
	*a = s->offset > o->lo ? s->offset : o->lo;
	*b = s->offset + s->count < o->hi ? s->offset + s->count : o->hi;
	return *a < *b;
}

/* The chunk table of o's shard: segments in index order, each piece in ascending chunks (the
 * order the host adds the chunks' sums in). */
static int build_chunks(struct optim_gpu *g, const struct optim *o, struct dp_error *err)
{
	size_t n = 0, a, b;

	for (int i = 0; i < o->nsegs; i++)
		if (seg_piece(o, &o->segs[i], &a, &b)) {
			n += (b - a + OG_CHUNK - 1) / OG_CHUNK;
			g->nparams += b - a;
		}
	if (n > INT32_MAX) {
		errprintf(err,
			  "optim_gpu_create (%s, %zu parameters): %zu chunks are more than one "
			  "launch can take; shard the optimizer across more ranks",
			  kind_title(g->kind), g->nparams, n);
		return -1;
	}
	g->nchunks = (int)n;
	if (!n)
		return 0;
	g->hchunks = (struct og_chunk *)malloc(n * sizeof(*g->hchunks));
	if (!g->hchunks) {
		errprintf(
		    err, "optim_gpu_create (%s, %zu parameters): out of host memory for %zu chunks",
		    kind_title(g->kind), g->nparams, n);
		return -1;
	}
	n = 0;
	for (int i = 0; i < o->nsegs; i++) {
		if (!seg_piece(o, &o->segs[i], &a, &b))
			continue;
		for (size_t k = a; k < b; k += OG_CHUNK) {
			g->hchunks[n].start = k;
			g->hchunks[n].count = (unsigned)(b - k < OG_CHUNK ? b - k : OG_CHUNK);
			g->hchunks[n].seg = i;
			g->hchunks[n].decay = o->segs[i].decay != 0;
			n++;
		}
	}
	return 0;
}

/* Device memory from the backend's arena, NULL for 0 bytes. */
static int og_alloc(struct optim_gpu *g, void **p, size_t bytes, const char *what,
		    struct dp_error *err)
{
	*p = NULL;
	if (!bytes)
		return 0;
	*p = g->be->ops->alloc(g->be, bytes);
	if (*p)
		return 0;
	errprintf(err,
		  "optim_gpu_create (%s, %zu parameters): %s (%zu bytes) on the GPU: %s; use a "
		  "smaller model, or shard the optimizer across ranks",
		  kind_title(g->kind), g->nparams, what, bytes, g->be->err.text);
	return -1;
}

extern "C" void optim_gpu_destroy(struct optim_gpu *g)
{
	if (!g)
		return;
	/* Queued kernels may still use the buffers; pinned host memory must not be freed under a
	 * copy. Nothing to report from here: the next backend call sees a failed stream. */
	cudaStreamSynchronize(g->stream);
	for (int k = 0; k < OPTIM_MAX_STATE; k++)
		g->be->ops->free(g->be, g->state[k]);
	g->be->ops->free(g->be, g->chunks);
	g->be->ops->free(g->be, g->partial);
	g->be->ops->free(g->be, g->ratio);
	if (g->hpartial)
		cudaFreeHost(g->hpartial);
	if (g->hratio)
		cudaFreeHost(g->hratio);
	if (g->ratio_sent)
		cudaEventDestroy(g->ratio_sent);
	cudaGetLastError();
	free(g->hchunks);
	free(g);
}

/* A failing call of optim_gpu_create: goto fail with the message. */
#define OG_CREATE(call)                                                                            \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess) {                                                           \
			og_fail(g, fn, err, #call, e_);                                            \
			goto fail;                                                                 \
		}                                                                                  \
	} while (0)

extern "C" int optim_gpu_create(struct optim_gpu **out, struct backend *be, const struct optim *o,
				struct dp_error *err)
{
	const char *fn = "optim_gpu_create";
	void *stream = be_cuda_stream(be);
	struct optim_gpu *g = NULL;
	size_t state_bytes = (o->hi - o->lo) * sizeof(float);

	*out = NULL;
	if (!stream) {
		errprintf(err,
			  "%s (%s): the backend is %s, not cuda: the GPU optimizer updates "
			  "parameters in GPU memory; use optim_step with other backends",
			  fn, kind_title(o->p.kind), be && be->ops ? be->ops->name : "(none)");
		return -1;
	}
	g = (struct optim_gpu *)calloc(1, sizeof(*g));
	if (!g) {
		errprintf(err, "%s (%s): out of host memory", fn, kind_title(o->p.kind));
		return -1;
	}
	g->be = be;
	g->stream = (cudaStream_t)stream;
	g->kind = o->p.kind;
	g->total = o->total;
	g->lo = o->lo;
	g->hi = o->hi;
	g->nsegs = o->nsegs;
	g->nstate = o->nstate;
	if (build_chunks(g, o, err) < 0)
		goto fail;
	for (int k = 0; k < g->nstate; k++)
		if (og_alloc(g, (void **)&g->state[k], state_bytes, o->state[k].name, err) < 0)
			goto fail;
	if (og_alloc(g, (void **)&g->chunks, g->nchunks * sizeof(*g->chunks), "chunk table", err) <
		0 ||
	    og_alloc(g, (void **)&g->partial, 2 * (size_t)g->nchunks * sizeof(double),
		     "partial sums", err) < 0)
		goto fail;
	if (g->nchunks > 0)
		OG_CREATE(
		    cudaMallocHost((void **)&g->hpartial, 2 * (size_t)g->nchunks * sizeof(double)));
	if (g->kind == OPTIM_LAMB) {
		if (og_alloc(g, (void **)&g->ratio, g->nsegs * sizeof(float), "trust ratios", err) <
		    0)
			goto fail;
		OG_CREATE(cudaMallocHost((void **)&g->hratio, g->nsegs * sizeof(float)));
		OG_CREATE(cudaEventCreateWithFlags(&g->ratio_sent, cudaEventDisableTiming));
	}
	if (g->nchunks > 0)
		OG_CREATE(cudaMemcpyAsync(g->chunks, g->hchunks, g->nchunks * sizeof(*g->chunks),
					  cudaMemcpyHostToDevice, g->stream));
	/* The arena does not clear what it hands out; optim.c's state starts at zero. */
	for (int k = 0; k < g->nstate; k++)
		if (state_bytes)
			OG_CREATE(cudaMemsetAsync(g->state[k], 0, state_bytes, g->stream));
	/* hchunks is pageable memory the copy reads; errors of earlier work show up here too. */
	OG_CREATE(cudaStreamSynchronize(g->stream));
	*out = g;
	return 0;
fail:
	optim_gpu_destroy(g);
	return -1;
}

/* The body of optim_gpu_grad_sumsq, with the caller's name for messages. */
static int grad_sumsq(struct optim_gpu *g, const struct optim *o, const float *grads, double *out,
		      const char *fn, struct dp_error *err)
{
	double sum = 0.0;

	if (check_shape(g, o, fn, err) < 0)
		return -1;
	if (g->nchunks > 0) {
		OG_LAUNCH(k_sumsq, g->chunks, grads, g->partial);
		OG_CHECK(cudaMemcpyAsync(g->hpartial, g->partial,
					 (size_t)g->nchunks * sizeof(double),
					 cudaMemcpyDeviceToHost, g->stream));
		OG_CHECK(cudaStreamSynchronize(g->stream));
		for (int c = 0; c < g->nchunks; c++)
			sum += g->hpartial[c];
	}
	*out = sum;
	return 0;
}

static struct og_lamb lamb_consts(const struct optim *o, double grad_norm)
{
	double t = (double)(o->step + 1);
	struct og_lamb c;

	c.b1 = (float)o->p.beta1;
	c.c1 = (float)(1.0 - o->p.beta1);
	c.b2 = (float)o->p.beta2;
	c.c2 = (float)(1.0 - o->p.beta2);
	c.eps = (float)o->p.eps;
	c.bc1 = (float)(1.0 - pow(o->p.beta1, t));
	c.bc2 = (float)(1.0 - pow(o->p.beta2, t));
	c.wd = (float)o->p.weight_decay;
	c.wd_on = o->p.weight_decay != 0;
	c.clip = 1.0f;
	float gn = (float)grad_norm, mg = (float)o->p.max_grad_norm;
	if (mg > 0 && gn > mg)
		c.clip = gn / mg;
	return c;
}

static int prepare(struct optim_gpu *g, struct optim *o, const float *params, const float *grads,
		   double grad_norm, double *sums, const char *fn, struct dp_error *err)
{
	if (check_shape(g, o, fn, err) < 0)
		return -1;
	if (g->kind != OPTIM_LAMB)
		return 0;
	struct og_lamb c = lamb_consts(o, grad_norm);
	for (int i = 0; i < g->nsegs; i++)
		sums[2 * i] = sums[2 * i + 1] = 0.0;
	if (!g->nchunks)
		return 0;
	OG_LAUNCH(k_lamb_prepare, g->chunks, params, grads, g->state[0], g->state[1], g->lo, c,
		  g->partial);
	OG_CHECK(cudaMemcpyAsync(g->hpartial, g->partial, 2 * (size_t)g->nchunks * sizeof(double),
				 cudaMemcpyDeviceToHost, g->stream));
	OG_CHECK(cudaStreamSynchronize(g->stream));
	for (int k = 0; k < g->nchunks; k++) {
		int i = g->hchunks[k].seg;
		sums[2 * i] += g->hpartial[2 * k];
		sums[2 * i + 1] += g->hpartial[2 * k + 1];
	}
	return 0;
}

/* LAMB's per-segment rates from the all-reduced sums (optim.c's lamb_apply), uploaded. */
static int lamb_ratios(struct optim_gpu *g, const struct optim *o, double lr, const double *sums,
		       const char *fn, struct dp_error *err)
{
	/* The previous step's upload may still be reading hratio (nothing since synchronised
	 * the stream if the caller skipped prepare). */
	OG_CHECK(cudaEventSynchronize(g->ratio_sent));
	for (int i = 0; i < g->nsegs; i++) {
		int use_wd = o->segs[i].decay && o->p.weight_decay != 0;
		float ratio = (float)lr;
		if (o->p.nvlamb || use_wd) {
			float pn = (float)sqrt(sums[2 * i]), un = (float)sqrt(sums[2 * i + 1]);
			if (pn != 0 && un != 0)
				ratio = (float)lr * (pn / un);
		}
		g->hratio[i] = ratio;
	}
	OG_CHECK(cudaMemcpyAsync(g->ratio, g->hratio, g->nsegs * sizeof(float),
				 cudaMemcpyHostToDevice, g->stream));
	OG_CHECK(cudaEventRecord(g->ratio_sent, g->stream));
	return 0;
}

static int apply(struct optim_gpu *g, struct optim *o, float *params, const float *grads, double lr,
		 const double *sums, const char *fn, struct dp_error *err)
{
	double t = (double)(o->step + 1);

	if (check_shape(g, o, fn, err) < 0)
		return -1;
	switch (g->kind) {
	case OPTIM_SGD: {
		struct og_sgd c;
		c.wd = (float)o->p.weight_decay;
		c.momentum = (float)o->p.momentum;
		c.damp1 = (float)(1.0 - o->p.dampening);
		c.neg_lr = (float)-lr;
		c.wd_on = o->p.weight_decay != 0;
		c.use_momentum = g->nstate > 0;
		c.first = o->step == 0;
		c.nesterov = o->p.nesterov != 0;
		OG_LAUNCH(k_sgd, g->chunks, params, grads, g->state[0], g->lo, c);
		break;
	}
	case OPTIM_ADAMW: {
		struct og_adam c;
		/* lr * wd rounded to double before the subtraction, as optim.c (built with
		 * -ffp-contract=off) does: the volatile keeps the host compiler from fusing. */
		volatile double lr_wd = lr * o->p.weight_decay;
		c.b1 = (float)o->p.beta1;
		c.c1 = (float)(1.0 - o->p.beta1);
		c.b2 = (float)o->p.beta2;
		c.c2 = (float)(1.0 - o->p.beta2);
		c.eps = (float)o->p.eps;
		c.bc2_sqrt = (float)sqrt(1.0 - pow(o->p.beta2, t));
		c.neg_step_size = (float)-(lr / (1.0 - pow(o->p.beta1, t)));
		c.decay = (float)(1.0 - lr_wd);
		c.wd_on = o->p.weight_decay != 0;
		OG_LAUNCH(k_adamw, g->chunks, params, grads, g->state[0], g->state[1], g->lo, c);
		break;
	}
	case OPTIM_LAMB: {
		/* grad_norm only sets the clip divisor, which the moments already absorbed. */
		struct og_lamb c = lamb_consts(o, 0.0);
		(void)grads;
		if (g->nchunks > 0 && lamb_ratios(g, o, lr, sums, fn, err) < 0)
			return -1;
		OG_LAUNCH(k_lamb_apply, g->chunks, params, g->state[0], g->state[1], g->lo, c,
			  g->ratio);
		break;
	}
	}
	o->step++;
	return 0;
}

extern "C" int optim_gpu_grad_sumsq(struct optim_gpu *g, const struct optim *o, const float *grads,
				    double *out, struct dp_error *err)
{
	return grad_sumsq(g, o, grads, out, "optim_gpu_grad_sumsq", err);
}

extern "C" int optim_gpu_prepare(struct optim_gpu *g, struct optim *o, const float *params,
				 const float *grads, double grad_norm, double *sums,
				 struct dp_error *err)
{
	return prepare(g, o, params, grads, grad_norm, sums, "optim_gpu_prepare", err);
}

extern "C" int optim_gpu_apply(struct optim_gpu *g, struct optim *o, float *params,
			       const float *grads, double lr, const double *sums,
			       struct dp_error *err)
{
	return apply(g, o, params, grads, lr, sums, "optim_gpu_apply", err);
}

/* optim_step: the protocol with this shard alone (LAMB's sums are this shard's). */
extern "C" int optim_gpu_step(struct optim_gpu *g, struct optim *o, float *params,
			      const float *grads, double lr, struct dp_error *err)
{
	const char *fn = "optim_gpu_step";
	double grad_norm = 0.0;

	if (optim_needs_grad_norm(o)) {
		double gsq;
		if (grad_sumsq(g, o, grads, &gsq, fn, err) < 0)
			return -1;
		grad_norm = sqrt(gsq);
	}
	if (prepare(g, o, params, grads, grad_norm, o->sums, fn, err) < 0)
		return -1;
	return apply(g, o, params, grads, lr, o->sums, fn, err);
}

extern "C" int optim_gpu_state_to_host(struct optim_gpu *g, struct optim *o, struct dp_error *err)
{
	const char *fn = "optim_gpu_state_to_host";
	size_t bytes = (g->hi - g->lo) * sizeof(float);

	if (check_shape(g, o, fn, err) < 0)
		return -1;
	for (int k = 0; k < g->nstate; k++)
		if (bytes)
			OG_CHECK(cudaMemcpyAsync(o->state[k].data, g->state[k], bytes,
						 cudaMemcpyDeviceToHost, g->stream));
	OG_CHECK(cudaStreamSynchronize(g->stream));
	return 0;
}

extern "C" int optim_gpu_state_from_host(struct optim_gpu *g, const struct optim *o,
					 struct dp_error *err)
{
	const char *fn = "optim_gpu_state_from_host";
	size_t bytes = (g->hi - g->lo) * sizeof(float);

	if (check_shape(g, o, fn, err) < 0)
		return -1;
	for (int k = 0; k < g->nstate; k++)
		if (bytes)
			OG_CHECK(cudaMemcpyAsync(g->state[k], o->state[k].data, bytes,
						 cudaMemcpyHostToDevice, g->stream));
	/* The copies read pageable memory the caller may free or change once this returns. */
	OG_CHECK(cudaStreamSynchronize(g->stream));
	return 0;
}
