/* comm_nccl.c — unit tests for the NCCL engine (trainer/dist/comm_nccl.c): every operation on
 * device buffers, and again on host buffers (malloc'ed, pinned, on the stack, host on one side and
 * device on the other) which the engine stages, on 1 rank and, with 2 or more GPUs, between
 * forked ranks against a direct sum; an abort from another thread; two ranks on one GPU refused;
 * with 2 GPUs a rank that dies, stalls or aborts, named on the other. Two ranks on one GPU
 * allowed (comm_nccl_opts.share_gpu, as device.allow_shared_gpu): where NCCL can (2.30 and
 * later, NCCL_MULTI_RANK_GPU_ENABLE=1) the operations and the faults between them run there,
 * where it cannot they are refused saying why and what to do. Skips with the reason without
 * NCCL or without a GPU.
 * CUDA runs only in forked ranks: a process that initialized CUDA cannot fork ranks that use it. */
#define _GNU_SOURCE
#include "common/env.h"
#include "common/error.h"
#include "trainer/dist/comm.h"
#include "t/lib/ranks.h"
#include "store/store.h"
#include "t/lib/tap.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(HAVE_NCCL) && defined(HAVE_CUDA)
#include <cuda_runtime.h>
#include <nccl.h>
#endif

enum scenario {
	SC_PROBE,	 /* 1 rank: can a comm be made? msg: "gpus N", or why not */
	SC_OPS,		 /* every operation against a direct computation */
	SC_HOST,	 /* the same on host buffers (staged by the engine) */
	SC_SHARED,	 /* every rank on GPU 0: creation must fail */
	SC_ABORT_THREAD, /* 1 rank: abort from another thread while allreduces run */
	SC_DIES,	 /* the special rank _exit()s mid-allreduce */
	SC_STALLS,	 /* the special rank never calls the allreduce */
	SC_ABORTS,	 /* the special rank aborts the job */
};

struct job {
	enum scenario sc;
	double timeout;
	int special; /* the rank the fault happens to; -1: none */
	int shared;  /* every rank uses GPU 0; 2: allowed to (comm_nccl_opts.share_gpu) */
};

static int open_all(const struct ranks_job *j, int rank, struct store **st, struct comm **c,
		    char *msg, size_t len)
{
	const struct job *s = j->arg;
	struct store_opts so = {.master_addr = "127.0.0.1",
				.master_port = j->port,
				.rank = rank,
				.world_size = j->world,
				.job = "comm-nccl-test",
				.timeout_s = 20};
	struct comm_nccl_opts co = {
	    .device = s->shared ? 0 : rank, .share_gpu = s->shared == 2, .timeout_s = s->timeout};
	struct dp_error err;
	*c = NULL;
	if (store_open(st, &so, &err) < 0)
		return ranks_msg(msg, len, &err);
	if (comm_nccl_create(c, *st, &co, &err) < 0) {
		store_close(*st, 2);
		return ranks_msg(msg, len, &err);
	}
	return 0;
}

static void close_all(struct store *st, struct comm *c, double timeout)
{
	if (c)
		c->ops->destroy(c);
	store_close(st, timeout);
}

#if defined(HAVE_NCCL) && defined(HAVE_CUDA)

/* ---------------------------------------------------------------------------------------
 * Every operation against a direct computation. A rank's msg is one line per check, "1 what"
 * or "0 what: why", then "digest <hex>" over the results every rank must share. */

struct report {
	char *msg;
	size_t len;
	uint64_t digest;
};

static void rep(struct report *r, int good, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rep(struct report *r, int good, const char *fmt, ...)
{
	size_t at = strlen(r->msg);
	va_list ap;
	if (at + 8 >= r->len)
		return;
	snprintf(r->msg + at, r->len - at, "%d ", good ? 1 : 0);
	at = strlen(r->msg);
	va_start(ap, fmt);
	vsnprintf(r->msg + at, r->len - at, fmt, ap);
	va_end(ap);
	at = strlen(r->msg);
	snprintf(r->msg + at, r->len - at, "\n");
}

static void digest(struct report *r, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		r->digest = (r->digest ^ b[i]) * 0x100000001b3ull;
}

/* Deterministic inputs in [-8, 8) with a spread of magnitudes, per rank, element and salt. */
static double gen(int rank, size_t i, int salt)
{
	uint64_t x = (uint64_t)rank * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull ^
		     (uint64_t)salt * 0x94d049bb133111ebull;
	x ^= x >> 31;
	x *= 0xd6e9b3a5c2f1e4b7ull;
	x ^= x >> 29;
	double u = (double)(x >> 11) / 9007199254740992.0;
	return (2 * u - 1) * (1 + (double)(x & 7));
}

/* The value rank r contributes at i, as type t. */
static double val(enum comm_dtype t, int r, size_t i, int salt)
{
	return t == COMM_F64 ? gen(r, i, salt) : (double)(float)gen(r, i, salt);
}

static void fill(void *p, size_t n, enum comm_dtype t, int rank, int salt)
{
	for (size_t i = 0; i < n; i++) {
		if (t == COMM_F64)
			((double *)p)[i] = gen(rank, i, salt);
		else
			((float *)p)[i] = (float)gen(rank, i, salt);
	}
}

static double get(const void *p, size_t i, enum comm_dtype t)
{
	return t == COMM_F64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

/* Element i reduced over w ranks: near the exact sum (or mean) of what they contributed. */
static int near_sum(double got, enum comm_dtype t, int w, size_t i, int salt, int avg, double *want)
{
	double s = 0, mag = 0;
	for (int r = 0; r < w; r++) {
		s += val(t, r, i, salt);
		mag += fabs(val(t, r, i, salt));
	}
	*want = avg ? s / w : s;
	return fabs(got - *want) <= (t == COMM_F64 ? 1e-13 : 2e-6) * (mag + 1e-30);
}

static const char *tname(enum comm_dtype t)
{
	return t == COMM_F64 ? "f64" : "f32";
}

/* Host <-> device. The copy to the device finishes before the comm's stream reads it. */
static int to_dev(void *d, const void *h, size_t n)
{
	return cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) == cudaSuccess &&
		       cudaDeviceSynchronize() == cudaSuccess
		   ? 0
		   : -1;
}

static int to_host(void *h, const void *d, size_t n)
{
	return cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

struct bufs {
	void *d;	       /* device */
	unsigned char *h, *h2; /* host */
};

static int bufs_get(struct bufs *b, size_t n)
{
	b->h = malloc(n);
	b->h2 = malloc(n);
	return b->h && b->h2 && cudaMalloc(&b->d, n) == cudaSuccess ? 0 : -1;
}

static void bufs_put(struct bufs *b)
{
	cudaFree(b->d);
	free(b->h);
	free(b->h2);
}

static void check_allreduce(struct comm *c, struct report *rp, size_t count, enum comm_dtype t,
			    enum comm_redop op)
{
	int r = c->rank, w = c->world_size, avg = op == COMM_AVG, salt = 10 + 2 * t + avg;
	size_t es = comm_dtype_size(t), bad = 0, first = 0;
	double got0 = 0, want0 = 0;
	struct dp_error err = {"a copy between host and device failed"};
	struct bufs b = {0};
	const char *name = avg ? "avg" : "sum";
	if (bufs_get(&b, count * es) < 0) {
		rep(rp, 0, "allreduce %s %s: out of (device) memory", name, tname(t));
		goto out;
	}
	fill(b.h, count, t, r, salt);
	if (to_dev(b.d, b.h, count * es) < 0 || c->ops->allreduce(c, b.d, count, t, op, &err) < 0 ||
	    to_host(b.h2, b.d, count * es) < 0) {
		rep(rp, 0, "allreduce %s %s: %s", name, tname(t), err.text);
		goto out;
	}
	for (size_t i = 0; i < count; i++) {
		double want, got = get(b.h2, i, t);
		if (!near_sum(got, t, w, i, salt, avg, &want) && !bad++) {
			first = i;
			got0 = got;
			want0 = want;
		}
	}
	rep(rp, !bad,
	    "allreduce %s %s of %zu on device buffers is the sum%s (%zu wrong; first %zu: %.17g, "
	    "want %.17g)",
	    name, tname(t), count, avg ? " / world" : "", bad, first, got0, want0);
	digest(rp, b.h2, count * es);
	/* the same inputs again: the same bits */
	if (to_dev(b.d, b.h, count * es) < 0 || c->ops->allreduce(c, b.d, count, t, op, &err) < 0 ||
	    to_host(b.h, b.d, count * es) < 0) {
		rep(rp, 0, "allreduce %s %s again: %s", name, tname(t), err.text);
		goto out;
	}
	rep(rp, memcmp(b.h, b.h2, count * es) == 0, "allreduce %s %s run twice: the same bits",
	    name, tname(t));
out:
	bufs_put(&b);
}

static void check_reduce_scatter(struct comm *c, struct report *rp, size_t count, enum comm_dtype t,
				 enum comm_redop op, int in_place)
{
	int r = c->rank, w = c->world_size, avg = op == COMM_AVG, salt = 20 + 2 * t + avg;
	size_t es = comm_dtype_size(t), all = count * (size_t)w, bad = 0;
	struct dp_error err = {"a copy between host and device failed"};
	struct bufs b = {0};
	void *out = NULL;
	const char *how = in_place ? "in place" : "out of place";
	if (bufs_get(&b, all * es) < 0 ||
	    (!in_place && cudaMalloc(&out, count * es) != cudaSuccess)) {
		rep(rp, 0, "reduce_scatter %s: out of (device) memory", how);
		goto out;
	}
	if (in_place)
		out = (unsigned char *)b.d + (size_t)r * count * es;
	fill(b.h, all, t, r, salt);
	if (to_dev(b.d, b.h, all * es) < 0 ||
	    c->ops->reduce_scatter(c, b.d, out, count, t, op, &err) < 0 ||
	    to_host(b.h2, out, count * es) < 0) {
		rep(rp, 0, "reduce_scatter %s %s %s: %s", avg ? "avg" : "sum", tname(t), how,
		    err.text);
		goto out;
	}
	for (size_t i = 0; i < count; i++) {
		double want;
		if (!near_sum(get(b.h2, i, t), t, w, (size_t)r * count + i, salt, avg, &want))
			bad++;
	}
	rep(rp, !bad, "reduce_scatter %s %s %s: this rank's block reduced (%zu wrong)",
	    avg ? "avg" : "sum", tname(t), how, bad);
out:
	if (!in_place)
		cudaFree(out);
	bufs_put(&b);
}

static void check_allgather(struct comm *c, struct report *rp, size_t count, enum comm_dtype t,
			    int in_place)
{
	int r = c->rank, w = c->world_size, salt = 30 + t;
	size_t es = comm_dtype_size(t), all = count * (size_t)w, bad = 0;
	struct dp_error err = {"a copy between host and device failed"};
	struct bufs b = {0};
	void *in = NULL;
	const char *how = in_place ? "in place" : "out of place";
	if (bufs_get(&b, all * es) < 0 ||
	    (!in_place && cudaMalloc(&in, count * es) != cudaSuccess)) {
		rep(rp, 0, "allgather %s: out of (device) memory", how);
		goto out;
	}
	memset(b.h, 0xee, all * es);
	fill(b.h + (size_t)r * count * es, count, t, r, salt);
	if (in_place) {
		in = (unsigned char *)b.d + (size_t)r * count * es;
		if (to_dev(b.d, b.h, all * es) < 0)
			goto fail;
	} else if (to_dev(b.d, b.h, all * es) < 0 ||
		   to_dev(in, b.h + (size_t)r * count * es, count * es) < 0) {
		goto fail;
	}
	if (c->ops->allgather(c, in, b.d, count, t, &err) < 0 || to_host(b.h2, b.d, all * es) < 0)
		goto fail;
	for (int q = 0; q < w; q++)
		for (size_t i = 0; i < count; i++)
			if (get(b.h2, (size_t)q * count + i, t) != val(t, q, i, salt))
				bad++;
	rep(rp, !bad, "allgather %s %s: every rank's block in place (%zu wrong)", tname(t), how,
	    bad);
	digest(rp, b.h2, all * es);
	goto out;
fail:
	rep(rp, 0, "allgather %s %s: %s", tname(t), how, err.text);
out:
	if (!in_place)
		cudaFree(in);
	bufs_put(&b);
}

static void check_broadcast(struct comm *c, struct report *rp, size_t bytes, int root)
{
	int r = c->rank;
	size_t bad = 0;
	struct dp_error err = {"a copy between host and device failed"};
	struct bufs b = {0};
	if (bufs_get(&b, bytes) < 0) {
		rep(rp, 0, "broadcast: out of (device) memory");
		goto out;
	}
	for (size_t i = 0; i < bytes; i++)
		b.h[i] = (unsigned char)(i * 7 + (size_t)r * 13 + 1);
	if (to_dev(b.d, b.h, bytes) < 0 || c->ops->broadcast(c, b.d, bytes, root, &err) < 0 ||
	    to_host(b.h2, b.d, bytes) < 0) {
		rep(rp, 0, "broadcast from rank %d: %s", root, err.text);
		goto out;
	}
	for (size_t i = 0; i < bytes; i++)
		if (b.h2[i] != (unsigned char)(i * 7 + (size_t)root * 13 + 1))
			bad++;
	rep(rp, !bad, "broadcast of %zu bytes from rank %d: the root's bytes (%zu wrong)", bytes,
	    root, bad);
out:
	bufs_put(&b);
}

/* after(): an allreduce issued right after a large copy into its buffer on another stream,
 * behind after(event of that copy), must reduce the copied values (without the device-side
 * wait NCCL would read the buffer while the copy still runs). */
static void check_after(struct comm *c, struct report *rp)
{
	enum { N = 16 << 20 }; /* 64 MiB of floats: milliseconds of copying */
	int r = c->rank, w = c->world_size, salt = 40;
	struct dp_error err = {"setting up the copy failed"};
	float *h = NULL, *back = NULL, *d = NULL;
	cudaStream_t side = NULL;
	cudaEvent_t ev = NULL;
	size_t bad = 0;
	int ok = c->ops->after != NULL;

	if (!ok) {
		rep(rp, 0, "the nccl engine has after()");
		return;
	}
	rep(rp, c->ops->after(c, NULL, &err) == 0, "after(NULL) does nothing");
	ok = cudaHostAlloc((void **)&h, N * sizeof(float), cudaHostAllocDefault) == cudaSuccess &&
	     (back = malloc(N * sizeof(float))) != NULL &&
	     cudaMalloc((void **)&d, N * sizeof(float)) == cudaSuccess &&
	     cudaMemset(d, 0, N * sizeof(float)) == cudaSuccess &&
	     cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess &&
	     cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess &&
	     cudaDeviceSynchronize() == cudaSuccess;
	if (ok) {
		fill(h, N, COMM_F32, r, salt);
		ok = cudaMemcpyAsync(d, h, N * sizeof(float), cudaMemcpyHostToDevice, side) ==
			 cudaSuccess &&
		     cudaEventRecord(ev, side) == cudaSuccess && c->ops->after(c, ev, &err) == 0 &&
		     c->ops->allreduce(c, d, N, COMM_F32, COMM_SUM, &err) == 0 &&
		     to_host(back, d, N * sizeof(float)) == 0;
	}
	for (size_t i = 0; ok && i < N; i += 997) {
		double want;
		bad += !near_sum(back[i], COMM_F32, w, i, salt, 0, &want);
	}
	rep(rp, ok && bad == 0, "allreduce behind after(copy event) sums the copied data%s%s",
	    ok ? "" : ": ", ok ? "" : err.text);
	if (ev)
		cudaEventDestroy(ev);
	if (side)
		cudaStreamDestroy(side);
	cudaFree(d);
	cudaFreeHost(h);
	free(back);
}

static int rank_ops(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	struct comm *c;
	struct dp_error err;
	struct report rp = {msg, len, 0xcbf29ce484222325ull};
	int w = j->world;
	if (open_all(j, rank, &st, &c, msg, len) < 0)
		return -1;
	msg[0] = 0;
	rep(&rp, strcmp(c->ops->name, "nccl") == 0 && c->rank == rank && c->world_size == w,
	    "the comm says nccl, rank %d of %d", c->rank, c->world_size);
	for (int t = COMM_F32; t <= COMM_F64; t++) {
		check_allreduce(c, &rp, 300007, t, COMM_SUM);
		check_allreduce(c, &rp, 1001, t, COMM_AVG);
	}
	check_reduce_scatter(c, &rp, 1001, COMM_F32, COMM_SUM, 0);
	check_reduce_scatter(c, &rp, 1001, COMM_F32, COMM_SUM, 1);
	check_reduce_scatter(c, &rp, 777, COMM_F64, COMM_AVG, 1);
	check_allgather(c, &rp, 1001, COMM_F32, 0);
	check_allgather(c, &rp, 333, COMM_F64, 1);
	check_broadcast(c, &rp, 12345, 0);
	check_broadcast(c, &rp, 1 << 20, w - 1);
	check_after(c, &rp);
	int ok3 = 1;
	for (int i = 0; i < 3; i++)
		if (c->ops->barrier(c, &err) < 0) {
			ok3 = 0;
			break;
		}
	rep(&rp, ok3, "3 barriers%s%s", ok3 ? "" : ": ", ok3 ? "" : err.text);
	float dummy;
	rep(&rp, c->ops->allreduce(c, &dummy, 0, COMM_F32, COMM_SUM, &err) == 0,
	    "an allreduce of 0 elements does nothing");
	/* last: a failure poisons the comm */
	int bad_root = c->ops->broadcast(c, NULL, 16, w, &err) < 0;
	rep(&rp, bad_root && strstr(err.text, "is not a rank"), "broadcast from rank %d fails: %s",
	    w, err.text);
	struct dp_error again;
	rep(&rp, c->ops->barrier(c, &again) < 0 && strcmp(err.text, again.text) == 0,
	    "... and the comm stays failed: %s", again.text);
	size_t at = strlen(msg);
	snprintf(msg + at, len - at, "digest %016llx", (unsigned long long)rp.digest);
	close_all(st, c, 5);
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * Host buffers (SC_HOST): every operation on malloc'ed and on pinned (cudaHostAlloc) memory,
 * F32 and F64, counts 0, 1, 7 and HOST_LARGE, against the direct computation; then one side
 * on the device and the other on the host, and a buffer on the stack. The checks of one memory
 * kind and type make one line: "<n> checks, <k> wrong; first: <what>". */

#define HOST_LARGE 300007

enum mem { MEM_DEVICE, MEM_MALLOC, MEM_PINNED };

static const char *mname(enum mem m)
{
	return m == MEM_DEVICE ? "device" : m == MEM_MALLOC ? "malloc" : "pinned";
}

/* n bytes of memory m, at least 1 so that count 0 passes a real pointer; NULL if none. */
static void *mem_get(enum mem m, size_t n)
{
	void *p = NULL;
	n = n ? n : 1;
	if (m == MEM_MALLOC)
		return malloc(n);
	if (m == MEM_DEVICE)
		return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
	return cudaHostAlloc(&p, n, cudaHostAllocDefault) == cudaSuccess ? p : NULL;
}

static void mem_put(enum mem m, void *p)
{
	if (!p)
		return;
	if (m == MEM_MALLOC)
		free(p);
	else if (m == MEM_DEVICE)
		cudaFree(p);
	else
		cudaFreeHost(p);
}

/* n bytes of h into p, or of p into h, wherever p is. */
static int mem_write(enum mem m, void *p, const void *h, size_t n)
{
	if (m == MEM_DEVICE)
		return to_dev(p, h, n);
	memcpy(p, h, n);
	return 0;
}

static int mem_read(enum mem m, void *h, const void *p, size_t n)
{
	if (m == MEM_DEVICE)
		return to_host(h, p, n);
	memcpy(h, p, n);
	return 0;
}

struct tally {
	int checks, bad;
	char first[300]; /* what the first wrong check said */
};

static void tally(struct tally *y, int good, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void tally(struct tally *y, int good, const char *fmt, ...)
{
	va_list ap;
	y->checks++;
	if (good || y->bad++)
		return;
	va_start(ap, fmt);
	vsnprintf(y->first, sizeof(y->first), fmt, ap);
	va_end(ap);
}

/* A reduction's count elements of got against the direct computation; "" or what is wrong. */
static void reduced(const void *got, size_t count, enum comm_dtype t, int w, size_t base, int salt,
		    int avg, struct dp_error *why)
{
	why->text[0] = 0;
	for (size_t i = 0; i < count; i++) {
		double want, g = get(got, i, t);
		if (!near_sum(g, t, w, base + i, salt, avg, &want)) {
			errprintf(why, "element %zu is %.17g, want %.17g", i, g, want);
			return;
		}
	}
}

/* Host scratch of at least n bytes (1 for n = 0, so that memcpy gets real pointers). */
static void *scratch(size_t n)
{
	return malloc(n ? n : 1);
}

static void host_allreduce(struct comm *c, struct report *rp, struct tally *y, enum mem m,
			   size_t count, enum comm_dtype t, enum comm_redop op)
{
	int w = c->world_size, avg = op == COMM_AVG, salt = 40 + 2 * t + avg;
	size_t n = count * comm_dtype_size(t);
	struct dp_error err = {"a copy between host and device failed"};
	struct dp_error why;
	unsigned char *h = scratch(n), *got = scratch(n);
	void *p = mem_get(m, n);
	const char *name = avg ? "avg" : "sum";
	if (!h || !got || !p) {
		tally(y, 0, "allreduce %s of %zu: out of memory", name, count);
		goto out;
	}
	fill(h, count, t, c->rank, salt);
	if (mem_write(m, p, h, n) < 0 || c->ops->allreduce(c, p, count, t, op, &err) < 0 ||
	    mem_read(m, got, p, n) < 0) {
		tally(y, 0, "allreduce %s of %zu: %s", name, count, err.text);
		goto out;
	}
	reduced(got, count, t, w, 0, salt, avg, &why);
	tally(y, !why.text[0], "allreduce %s of %zu: %s", name, count, why.text);
	digest(rp, got, n);
out:
	mem_put(m, p);
	free(h);
	free(got);
}

/* in on min, out on mout; in place: out is in's block of this rank (min == mout). */
static void host_reduce_scatter(struct comm *c, struct tally *y, enum mem min, enum mem mout,
				size_t count, enum comm_dtype t, enum comm_redop op, int in_place)
{
	int r = c->rank, w = c->world_size, avg = op == COMM_AVG, salt = 50 + 2 * t + avg;
	size_t blk = count * comm_dtype_size(t), all = blk * (size_t)w;
	struct dp_error err = {"a copy between host and device failed"};
	struct dp_error why;
	unsigned char *h = scratch(all), *got = scratch(all);
	void *in = mem_get(min, all), *out = in_place ? NULL : mem_get(mout, blk);
	const char *how = in_place ? "in place" : "out of place";
	if (!h || !got || !in || (!in_place && !out)) {
		tally(y, 0, "reduce_scatter %s of %zu %s: out of memory", mname(min), count, how);
		goto out;
	}
	if (in_place)
		out = (unsigned char *)in + (size_t)r * blk;
	fill(h, count * (size_t)w, t, r, salt);
	if (mem_write(min, in, h, all) < 0 ||
	    c->ops->reduce_scatter(c, in, out, count, t, op, &err) < 0 ||
	    mem_read(mout, got, out, blk) < 0) {
		tally(y, 0, "reduce_scatter %s to %s of %zu %s: %s", mname(min), mname(mout), count,
		      how, err.text);
		goto out;
	}
	reduced(got, count, t, w, (size_t)r * count, salt, avg, &why);
	tally(y, !why.text[0], "reduce_scatter %s to %s of %zu %s: %s", mname(min), mname(mout),
	      count, how, why.text);
	/* out of place, in is only read: staging must not have written it back */
	if (!in_place && mem_read(min, got, in, all) == 0)
		tally(y, memcmp(got, h, all) == 0,
		      "reduce_scatter %s of %zu out of place: in changed", mname(min), count);
out:
	if (!in_place)
		mem_put(mout, out);
	mem_put(min, in);
	free(h);
	free(got);
}

/* in on min, out on mout; in place: in is out's block of this rank (min == mout). */
static void host_allgather(struct comm *c, struct report *rp, struct tally *y, enum mem min,
			   enum mem mout, size_t count, enum comm_dtype t, int in_place)
{
	int r = c->rank, w = c->world_size, salt = 60 + t;
	size_t blk = count * comm_dtype_size(t), all = blk * (size_t)w, bad = 0, first = 0;
	struct dp_error err = {"a copy between host and device failed"};
	unsigned char *h = scratch(all), *got = scratch(all);
	void *out = mem_get(mout, all), *in = in_place ? NULL : mem_get(min, blk);
	const char *how = in_place ? "in place" : "out of place";
	if (!h || !got || !out || (!in_place && !in)) {
		tally(y, 0, "allgather %s of %zu %s: out of memory", mname(min), count, how);
		goto out;
	}
	memset(h, 0xee, all);
	fill(h + (size_t)r * blk, count, t, r, salt);
	if (in_place)
		in = (unsigned char *)out + (size_t)r * blk;
	if (mem_write(mout, out, h, all) < 0 ||
	    (!in_place && mem_write(min, in, h + (size_t)r * blk, blk) < 0) ||
	    c->ops->allgather(c, in, out, count, t, &err) < 0 ||
	    mem_read(mout, got, out, all) < 0) {
		tally(y, 0, "allgather %s to %s of %zu %s: %s", mname(min), mname(mout), count, how,
		      err.text);
		goto out;
	}
	for (int q = 0; q < w; q++)
		for (size_t i = 0; i < count; i++)
			if (get(got, (size_t)q * count + i, t) != val(t, q, i, salt) && !bad++)
				first = (size_t)q * count + i;
	tally(y, !bad, "allgather %s to %s of %zu %s: %zu elements wrong, first %zu", mname(min),
	      mname(mout), count, how, bad, first);
	digest(rp, got, all);
out:
	if (!in_place)
		mem_put(min, in);
	mem_put(mout, out);
	free(h);
	free(got);
}

static void host_broadcast(struct comm *c, struct report *rp, struct tally *y, enum mem m,
			   size_t bytes, int root)
{
	size_t bad = 0;
	struct dp_error err = {"a copy between host and device failed"};
	unsigned char *h = scratch(bytes), *got = scratch(bytes);
	void *p = mem_get(m, bytes);
	if (!h || !got || !p) {
		tally(y, 0, "broadcast of %zu bytes: out of memory", bytes);
		goto out;
	}
	for (size_t i = 0; i < bytes; i++)
		h[i] = (unsigned char)(i * 7 + (size_t)c->rank * 13 + 1);
	if (mem_write(m, p, h, bytes) < 0 || c->ops->broadcast(c, p, bytes, root, &err) < 0 ||
	    mem_read(m, got, p, bytes) < 0) {
		tally(y, 0, "broadcast of %zu bytes from rank %d: %s", bytes, root, err.text);
		goto out;
	}
	for (size_t i = 0; i < bytes; i++)
		if (got[i] != (unsigned char)(i * 7 + (size_t)root * 13 + 1))
			bad++;
	tally(y, !bad, "broadcast of %zu bytes from rank %d: %zu bytes wrong", bytes, root, bad);
	digest(rp, got, bytes);
out:
	mem_put(m, p);
	free(h);
	free(got);
}

static void rep_tally(struct report *rp, const struct tally *y, const char *what)
{
	rep(rp, y->checks > 0 && !y->bad, "%s (%d checks, %d wrong%s%.300s)", what, y->checks,
	    y->bad, y->bad ? "; first: " : "", y->first);
}

static int rank_host(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	static const size_t counts[] = {0, 1, 7, HOST_LARGE};
	struct store *st;
	struct comm *c;
	char what[200];
	struct dp_error err;
	struct report rp = {msg, len, 0xcbf29ce484222325ull};
	int w = j->world;
	if (open_all(j, rank, &st, &c, msg, len) < 0)
		return -1;
	msg[0] = 0;
	for (int m = MEM_MALLOC; m <= MEM_PINNED; m++)
		for (int t = COMM_F32; t <= COMM_F64; t++) {
			struct tally y = {0};
			for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
				size_t n = counts[k];
				host_allreduce(c, &rp, &y, m, n, t, COMM_SUM);
				host_allreduce(c, &rp, &y, m, n, t, COMM_AVG);
				host_reduce_scatter(c, &y, m, m, n, t, COMM_SUM, 0);
				host_reduce_scatter(c, &y, m, m, n, t, COMM_AVG, 1);
				host_allgather(c, &rp, &y, m, m, n, t, 0);
				host_allgather(c, &rp, &y, m, m, n, t, 1);
				host_broadcast(c, &rp, &y, m, n * comm_dtype_size(t), (int)(k % w));
			}
			snprintf(what, sizeof(what),
				 "every operation on %s host buffers, %s, counts 0, 1, 7, %d",
				 mname(m), tname(t), HOST_LARGE);
			rep_tally(&rp, &y, what);
		}
	/* one side on the host, the other on the device */
	struct tally y = {0};
	static const enum mem mixed[][2] = {{MEM_MALLOC, MEM_DEVICE},
					    {MEM_DEVICE, MEM_MALLOC},
					    {MEM_PINNED, MEM_DEVICE},
					    {MEM_DEVICE, MEM_PINNED}};
	static const size_t mixed_counts[] = {7, HOST_LARGE};
	for (size_t k = 0; k < sizeof(mixed) / sizeof(mixed[0]); k++)
		for (int t = COMM_F32; t <= COMM_F64; t++)
			for (size_t i = 0; i < 2; i++) {
				enum mem a = mixed[k][0], b = mixed[k][1];
				size_t n = mixed_counts[i];
				host_reduce_scatter(c, &y, a, b, n, t, COMM_SUM, 0);
				host_allgather(c, &rp, &y, a, b, n, t, 0);
			}
	snprintf(what, sizeof(what),
		 "reduce_scatter and allgather between host and device buffers (malloc, pinned; "
		 "either way), f32 and f64, counts 7 and %d",
		 HOST_LARGE);
	rep_tally(&rp, &y, what);
	/* what the trainer does: a loss average in two doubles on the stack, a counter broadcast */
	double loss[2] = {1.5 + rank, 2};
	long long tracked = rank == 0 ? 123456789012345ll : -1;
	int okl = c->ops->allreduce(c, loss, 2, COMM_F64, COMM_SUM, &err) == 0;
	rep(&rp, okl && loss[0] == 1.5 * w + w * (w - 1) / 2.0 && loss[1] == 2.0 * w,
	    "allreduce of 2 doubles on the stack: %.17g %.17g%s%s", loss[0], loss[1],
	    okl ? "" : "; ", okl ? "" : err.text);
	int okt = c->ops->broadcast(c, &tracked, sizeof(tracked), 0, &err) == 0;
	rep(&rp, okt && tracked == 123456789012345ll,
	    "broadcast of an int64 on the stack: %lld%s%s", tracked, okt ? "" : "; ",
	    okt ? "" : err.text);
	/* and device buffers still go straight to NCCL after all the staging */
	struct tally yd = {0};
	host_allreduce(c, &rp, &yd, MEM_DEVICE, 1001, COMM_F32, COMM_SUM);
	rep_tally(&rp, &yd, "an allreduce on device buffers afterwards");
	size_t at = strlen(msg);
	snprintf(msg + at, len - at, "digest %016llx", (unsigned long long)rp.digest);
	close_all(st, c, 5);
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * Faults. Survivors loop allreduce until it fails; msg gets "<seconds the failing call
 * took>|<its message>|<the message of the call after it>". */

static int survive(struct comm *c, size_t count, int iters, char *msg, size_t len)
{
	void *buf = NULL;
	struct dp_error err;
	int rv = -1;
	if (cudaMalloc(&buf, count * sizeof(float)) != cudaSuccess ||
	    cudaMemset(buf, 0, count * sizeof(float)) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess) {
		snprintf(msg, len, "out of device memory");
		goto out;
	}
	for (int it = 0; it < iters; it++) {
		double t0 = ranks_now();
		if (c->ops->allreduce(c, buf, count, COMM_F32, COMM_SUM, &err) < 0) {
			double t = ranks_now() - t0;
			struct dp_error again;
			c->ops->allreduce(c, buf, count, COMM_F32, COMM_SUM, &again);
			snprintf(msg, len, "%.2f|%s|%s", t, err.text, again.text);
			rv = 0;
			goto out;
		}
	}
	snprintf(msg, len, "no failure in %d allreduces", iters);
out:
	cudaFree(buf);
	return rv;
}

/* n allreduces of count elements, whatever they return. */
static void survive_n(struct comm *c, size_t count, int n)
{
	void *buf = NULL;
	struct dp_error err;
	if (cudaMalloc(&buf, count * sizeof(float)) == cudaSuccess &&
	    cudaMemset(buf, 0, count * sizeof(float)) == cudaSuccess &&
	    cudaDeviceSynchronize() == cudaSuccess)
		for (int i = 0; i < n; i++)
			c->ops->allreduce(c, buf, count, COMM_F32, COMM_SUM, &err);
	cudaFree(buf);
}

struct thread_arg {
	struct comm *c;
	double after;
	const char *reason;
};

static void *abort_thread(void *p)
{
	struct thread_arg *a = p;
	ranks_sleep(a->after);
	a->c->ops->abort(a->c, a->reason);
	return NULL;
}

static void *loop_thread(void *p)
{
	struct thread_arg *a = p;
	char msg[RANKS_MSG];
	survive(a->c, 1 << 20, 1000000, msg, sizeof(msg)); /* the survivors' count */
	return NULL;
}

static int rank_fault(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	const struct job *s = j->arg;
	struct store *st;
	struct comm *c;
	struct dp_error err;
	pthread_t th;
	if (open_all(j, rank, &st, &c, msg, len) < 0)
		return -1;
	if (s->sc == SC_ABORT_THREAD) {
		struct thread_arg a = {c, 0.5, "watchdog: step 7 is stuck"};
		pthread_create(&th, NULL, abort_thread, &a);
		int rv = survive(c, 1 << 22, 1000000, msg, len);
		pthread_join(th, NULL);
		close_all(st, c, 2);
		return rv;
	}
	if (rank == s->special) {
		switch (s->sc) {
		case SC_DIES: {
			struct thread_arg a = {c, 0, NULL};
			pthread_create(&th, NULL, loop_thread, &a);
			ranks_sleep(0.5);
			_exit(3);
		}
		case SC_STALLS:
			/* in the program, not in the comm: the others must time out */
			store_poll_abort(st, 30, &err);
			_exit(0);
		case SC_ABORTS:
			/* the survivors' allreduces, with the same counts, then the abort */
			survive_n(c, 1 << 20, 2);
			c->ops->abort(c, "rank 1: loss is nan");
			break;
		default:
			break;
		}
	}
	int rv = survive(c, 1 << 20, 1000000, msg, len);
	close_all(st, c, 1);
	return rv;
}

/* The shared GPU: both ranks fail to create, with the same message. */
static int rank_shared(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	struct comm *c;
	if (open_all(j, rank, &st, &c, msg, len) == 0) {
		snprintf(msg, len, "rank %d made a comm on a shared GPU", rank);
		close_all(st, c, 2);
		return -1;
	}
	return 0;
}

/* A fault and what every survivor's message must say about it. */
struct fault_case {
	const char *name;
	int world;
	int nowait; /* the rank not waited for; -1: none */
	struct job job;
	const char *want1, *want2;
	double max_s; /* how long the survivors' failing call may take */
};

/* "<t>|<msg>|<again>": the failing call's seconds, message, and whether the next matched. */
static void check_failure(const struct fault_case *f, const struct ranks_out *out)
{
	for (int r = 0; r < f->world; r++) {
		if (r == f->job.special)
			continue;
		const char *m = out[r].msg;
		const char *bar = strchr(m, '|');
		const char *bar2 = bar ? strchr(bar + 1, '|') : NULL;
		char first[RANKS_MSG] = "";
		if (bar && bar2)
			snprintf(first, sizeof(first), "%.*s", (int)(bar2 - bar - 1), bar + 1);
		if (!ok(out[r].status == 0 && bar2, "%s: rank %d's allreduce failed (exit %d)",
			f->name, r, out[r].status))
			diag("rank %d: %s", r, m);
		else
			note("%s: rank %d: %s", f->name, r, first);
		like(first, f->want1, "%s: rank %d's message names it", f->name, r);
		like(first, f->want2, "%s: rank %d's message says what happened", f->name, r);
		ok(atof(m) < f->max_s, "%s: rank %d failed within %.0f s (%.2f s)", f->name, r,
		   f->max_s, atof(m));
		ok(bar2 && strcmp(first, bar2 + 1) == 0, "%s: rank %d: the comm stays failed",
		   f->name, r);
	}
}

/* sc: SC_OPS (device buffers) or SC_HOST (host buffers). */
static void test_ops(int world, enum scenario sc, int shared)
{
	struct ranks_out out[RANKS_MAX];
	struct job s = {.sc = sc, .timeout = 60, .special = -1, .shared = shared};
	struct ranks_job j = {.world = world, .arg = &s};
	const char *what = sc == SC_HOST ? "host buffers" : "device buffers";
	ranks_run(&j, sc == SC_HOST ? rank_host : rank_ops, -1, 120, out);
	const char *d0 = strstr(out[0].msg, "digest");
	int same = 1;
	for (int r = 0; r < world; r++) {
		const char *d = strstr(out[r].msg, "digest");
		if (!d0 || !d || strcmp(d0, d) != 0)
			same = 0;
		if (!ok(out[r].status == 0, "world %d rank %d ran every operation on %s", world, r,
			what)) {
			diag("rank %d (exit %d): %s", r, out[r].status, out[r].msg);
			continue;
		}
		/* rank 0's checks one by one; the others' summed up */
		int bad = 0;
		for (char *l = out[r].msg; *l && strncmp(l, "digest", 6) != 0;) {
			char *nl = strchr(l, '\n');
			if (nl)
				*nl = 0;
			if (r == 0)
				ok(l[0] == '1', "world %d %s: %s", world, what, l + 2);
			else if (l[0] != '1' && !bad++)
				diag("rank %d: %s", r, l + 2);
			if (!nl)
				break;
			l = nl + 1;
		}
		if (r > 0)
			ok(!bad, "world %d rank %d %s: every check passed (%d failed)", world, r,
			   what, bad);
	}
	ok(same, "world %d %s: every rank holds the same bits", world, what);
}

/* The faults between 2 ranks, each on a GPU of its own or (shared 2) both on GPU 0. */
static void test_faults(int shared)
{
	struct ranks_out out[RANKS_MAX];
	static const struct fault_case faults[] = {
	    {"rank 1 dies", 2, -1, {SC_DIES, 30, 1, 0}, "rank 1", "died", 5},
	    {"rank 0 dies", 2, -1, {SC_DIES, 30, 0, 0}, "rank 0", "died", 5},
	    {"rank 1 stalls", 2, 1, {SC_STALLS, 2, 1, 0}, "rank 1", "stopped taking part", 8},
	    {"rank 1 aborts", 2, -1, {SC_ABORTS, 30, 1, 0}, "loss is nan", "rank 1", 5},
	};
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
		struct fault_case f = faults[i];
		char name[96];
		snprintf(name, sizeof(name), "%s%s", shared ? "one GPU: " : "", f.name);
		f.name = name;
		f.job.shared = shared;
		struct ranks_job j = {.world = f.world, .arg = &f.job};
		ranks_run(&j, rank_fault, f.nowait, 60, out);
		check_failure(&f, out);
	}
}

static void test_gpus(int ngpu)
{
	struct ranks_out out[RANKS_MAX];
	int w = ngpu < 4 ? ngpu : 4;

	test_ops(1, SC_OPS, 0);
	test_ops(1, SC_HOST, 0);
	if (w >= 2) {
		test_ops(w, SC_OPS, 0);
		test_ops(w, SC_HOST, 0);
	} else {
		skip(2, "1 GPU: the operations between ranks need 2");
	}

	/* the abort's thread frees the NCCL communicator while allreduces poll it */
	static const struct fault_case abort_thread = {
	    "abort from another thread", 1, -1, {SC_ABORT_THREAD, 60, -1, 0}, "aborted: watchdog",
	    "step 7 is stuck",		 5};
	struct ranks_job j = {.world = 1, .arg = &abort_thread.job};
	ranks_run(&j, rank_fault, -1, 60, out);
	check_failure(&abort_thread, out);

	/* two ranks on one GPU: refused on both, before NCCL sees them */
	struct job shared = {.sc = SC_SHARED, .timeout = 30, .special = -1, .shared = 1};
	j = (struct ranks_job){.world = 2, .arg = &shared};
	ranks_run(&j, rank_shared, -1, 60, out);
	for (int r = 0; r < 2; r++) {
		ok(out[r].status == 0, "shared GPU: rank %d's creation failed (exit %d)", r,
		   out[r].status);
		like(out[r].msg, "ranks 0 and 1 on ", "shared GPU: rank %d names both ranks", r);
		like(out[r].msg, "both use GPU 0 (PCI ", "... and the GPU");
		like(out[r].msg, "srun --gpus-per-task=1", "... and what to do");
	}
	note("shared GPU: %s", out[0].msg);

	/* two ranks on one GPU, allowed: NCCL 2.30 and later put them there when asked to */
	int v = 0;
	if (ncclGetVersion(&v) != ncclSuccess)
		v = 0;
	if (v < 23000) {
		struct job allowed = {.sc = SC_SHARED, .timeout = 30, .special = -1, .shared = 2};
		j = (struct ranks_job){.world = 2, .arg = &allowed};
		ranks_run(&j, rank_shared, -1, 60, out);
		for (int r = 0; r < 2; r++) {
			ok(out[r].status == 0,
			   "shared GPU allowed, NCCL %d.%d.%d: rank %d's creation failed (exit %d)",
			   v / 10000, v / 100 % 100, v % 100, r, out[r].status);
			like(out[r].msg, "device.allow_shared_gpu is set, but NCCL ",
			     "... saying the sharing was allowed (rank %d)", r);
			like(out[r].msg, "only from 2.30", "... why NCCL cannot");
			like(out[r].msg, "DPTRAIN_GPU_COMM=cpu", "... and the other way");
		}
		note("shared GPU allowed: %s", out[0].msg);
		skip(1, "NCCL %d.%d.%d: several ranks on one GPU need NCCL 2.30", v / 10000,
		     v / 100 % 100, v % 100);
	} else {
		setenv(ENV_NCCL_MULTI_RANK_GPU_ENABLE, "1", 1);
		test_ops(2, SC_OPS, 2);
		test_ops(2, SC_HOST, 2);
		test_faults(2);
		unsetenv(ENV_NCCL_MULTI_RANK_GPU_ENABLE);
	}

	if (ngpu < 2) {
		skip(16, "1 GPU: the faults between ranks on GPUs of their own need 2");
		return;
	}
	test_faults(0);
}

#endif /* HAVE_NCCL && HAVE_CUDA */

/* Can this build and machine make an NCCL comm? msg: "gpus N", or creation's message. */
static int rank_probe(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store *st;
	struct comm *c;
	if (open_all(j, rank, &st, &c, msg, len) < 0)
		return 0; /* the message says why */
	int n = 0;
#if defined(HAVE_NCCL) && defined(HAVE_CUDA)
	if (cudaGetDeviceCount(&n) != cudaSuccess)
		n = 0;
#endif
	snprintf(msg, len, "gpus %d", n);
	close_all(st, c, 2);
	return 0;
}

int main(void)
{
	struct ranks_out out[RANKS_MAX];
	struct job probe = {.sc = SC_PROBE, .timeout = 60, .special = -1};
	struct ranks_job j = {.world = 1, .arg = &probe};
	double t0 = ranks_now();
	ranks_run(&j, rank_probe, -1, 90, out);
	const char *m = out[0].msg;
	if (out[0].status == 0 && (strstr(m, "this build has no NCCL") || strstr(m, "no GPU")))
		plan_skip_all("%s", m);
	if (out[0].status != 0 || strncmp(m, "gpus ", 5) != 0) {
		fail("a 1-rank NCCL comm can be made, or its creation says why not (exit %d)",
		     out[0].status);
		diag("%s", m);
		return done_testing();
	}
	pass("a 1-rank NCCL comm can be made (%s)", m);
#if defined(HAVE_NCCL) && defined(HAVE_CUDA)
	test_gpus(atoi(m + 5));
#endif
	diag("comm_nccl tests took %.1f s", ranks_now() - t0);
	return done_testing();
}
