/* cuda_emu.h — runs the CUDA backend's own kernels (trainer/backend/cuda_*_kernels.cuh) on the
 * host, for t/unit/kernels_host.cc: one block at a time, a host thread per CUDA thread.
 * __syncthreads is a barrier of the block's live threads (a thread that returned counts as
 * arrived, as on the GPU), __shared__ variables are statics (one block runs at a time), and the
 * rounding intrinsics (__fadd_rn, __fmaf_rn, ...) are the IEEE operations they name. It checks
 * what a kernel computes, its indexing and its coverage of the data on any machine; not the
 * GPU's scheduling, memory model or speed (t/unit/backend_cuda.c does that on a GPU). Include it
 * before the kernels' headers, in one C++ file. */
#ifndef DPTRAIN_CUDA_EMU_H
#define DPTRAIN_CUDA_EMU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <vector_types.h>

/* Device code as host code. */
#undef __device__
#undef __global__
#undef __shared__
#define __device__ __attribute__((unused))
#define __global__ __attribute__((unused))
#define __shared__ static

static thread_local uint3 emu_thread;
static uint3 emu_block;
static dim3 emu_block_dim, emu_grid_dim;
#define threadIdx emu_thread
#define blockIdx  emu_block
#define blockDim  emu_block_dim
#define gridDim	  emu_grid_dim

static inline float __fadd_rn(float a, float b)
{
	return a + b;
}

static inline float __fsub_rn(float a, float b)
{
	return a - b;
}

static inline float __fmul_rn(float a, float b)
{
	return a * b;
}

static inline float __fdiv_rn(float a, float b)
{
	return a / b;
}

static inline float __fmaf_rn(float a, float b, float c)
{
	return fmaf(a, b, c);
}

/* The block's barrier: `live` threads take part; a thread that returns leaves it. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned live, arrived, round;
} emu_bar = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};

static void emu_release_locked(void)
{
	if (emu_bar.arrived > 0 && emu_bar.arrived >= emu_bar.live) {
		emu_bar.arrived = 0;
		emu_bar.round++;
		pthread_cond_broadcast(&emu_bar.cv);
	}
}

static inline void __syncthreads(void)
{
	pthread_mutex_lock(&emu_bar.mu);
	unsigned round = emu_bar.round;
	emu_bar.arrived++;
	emu_release_locked();
	while (emu_bar.round == round)
		pthread_cond_wait(&emu_bar.cv, &emu_bar.mu);
	pthread_mutex_unlock(&emu_bar.mu);
}

static void emu_leave(void)
{
	pthread_mutex_lock(&emu_bar.mu);
	emu_bar.live--;
	emu_release_locked();
	pthread_mutex_unlock(&emu_bar.mu);
}

/* The block's threads: a pool of host threads, made at the first launch and kept (each block
 * of every launch runs on them), so that a grid costs wake-ups, not thread creations. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	unsigned n, gen, finished;
	void (*run)(void *);
	void *arg;
} emu_pool = {PTHREAD_MUTEX_INITIALIZER,
	      PTHREAD_COND_INITIALIZER,
	      PTHREAD_COND_INITIALIZER,
	      0,
	      0,
	      0,
	      NULL,
	      NULL};

static void *emu_worker(void *p)
{
	unsigned tid = (unsigned)(uintptr_t)p, seen = 0;

	pthread_mutex_lock(&emu_pool.mu);
	for (;;) {
		while (emu_pool.gen == seen)
			pthread_cond_wait(&emu_pool.go, &emu_pool.mu);
		seen = emu_pool.gen;
		pthread_mutex_unlock(&emu_pool.mu);
		emu_thread.x = tid, emu_thread.y = 0, emu_thread.z = 0;
		emu_pool.run(emu_pool.arg);
		emu_leave();
		pthread_mutex_lock(&emu_pool.mu);
		if (++emu_pool.finished == emu_pool.n)
			pthread_cond_signal(&emu_pool.done);
	}
	return NULL;
}

template <typename F> static void emu_call(void *f)
{
	(*(F *)f)();
}

/* kernel<<<grid, threads>>>(args...), blocks in order, returning when the grid is done. Every
 * launch of a test uses the same block size. */
template <typename K, typename... A>
static void emu_launch(dim3 grid, unsigned threads, K kernel, A... args)
{
	auto body = [&]() { kernel(args...); };

	if (emu_pool.n == 0) {
		pthread_attr_t attr;
		pthread_t th;
		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, 256 << 10);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		for (unsigned t = 0; t < threads; t++)
			if (pthread_create(&th, &attr, emu_worker, (void *)(uintptr_t)t)) {
				fprintf(stderr, "cuda_emu: pthread_create failed\n");
				abort();
			}
		pthread_attr_destroy(&attr);
		emu_pool.n = threads;
	}
	if (threads != emu_pool.n) {
		fprintf(stderr, "cuda_emu: blocks of %u threads, then of %u\n", emu_pool.n,
			threads);
		abort();
	}
	emu_grid_dim = grid;
	emu_block_dim = dim3(threads);
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				pthread_mutex_lock(&emu_pool.mu);
				emu_block.x = x, emu_block.y = y, emu_block.z = z;
				emu_bar.live = threads, emu_bar.arrived = 0;
				emu_pool.run = emu_call<decltype(body)>;
				emu_pool.arg = &body;
				emu_pool.finished = 0;
				emu_pool.gen++;
				pthread_cond_broadcast(&emu_pool.go);
				while (emu_pool.finished < emu_pool.n)
					pthread_cond_wait(&emu_pool.done, &emu_pool.mu);
				pthread_mutex_unlock(&emu_pool.mu);
			}
}

#endif
