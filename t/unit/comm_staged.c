/* comm_staged.c — the staged comm (trainer/dist/comm_staged.c) over the real CPU engine, with
 * forked ranks, on the host: its "device memory" is an arena of this test (is_device: inside
 * it; copy: memcpy, counted), so every path that stages runs here without a GPU. Every
 * operation, with device memory on either side, must give the bits the CPU engine gives the
 * same data in host memory, copy what it must and nothing more; a failed copy fails that rank
 * and, through the inner comm's abort, the others at once, naming it. The CUDA copies
 * themselves (comm_staged_cuda) are t/t1000-gpu.t's, on a GPU. */
#include "trainer/dist/comm.h"
#include "t/lib/ranks.h"
#include "store/store.h"
#include "t/lib/tap.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_S 30

/* The arena that plays device memory, and what the stage did with it. */
struct fake_dev {
	unsigned char *lo;
	size_t size;
	long copies_out, copies_in; /* device to host, host to device */
	long fail_at;		    /* the copy (counting both ways, from 1) that fails; 0: none */
};

static int fake_is_device(void *ctx, const void *p)
{
	struct fake_dev *d = ctx;
	const unsigned char *q = p;
	return q >= d->lo && q < d->lo + d->size;
}

static int fake_copy(void *ctx, void *dst, const void *src, size_t bytes, int to_dev,
		     struct dp_error *err)
{
	struct fake_dev *d = ctx;
	++*(to_dev ? &d->copies_in : &d->copies_out);
	if (d->fail_at && d->copies_in + d->copies_out == d->fail_at)
		return errprintf(err, "the test's copy %ld fails", d->fail_at);
	/* a staged copy never touches the arena on its host side, nor host memory on both */
	if (fake_is_device(d, dst) == fake_is_device(d, src) ||
	    fake_is_device(d, to_dev ? src : dst))
		return errprintf(err, "a copy %s the arena the wrong way",
				 to_dev ? "into" : "out of");
	memcpy(dst, src, bytes);
	return 0;
}

struct job {
	int fail_rank; /* the rank whose stage fails (-1: none) */
	long fail_at;
};

static int open_staged(const struct ranks_job *j, int rank, struct fake_dev *d, struct store **st,
		       struct comm **c, char *msg, size_t len)
{
	struct store_opts so = {.master_addr = "127.0.0.1",
				.master_port = j->port,
				.rank = rank,
				.world_size = j->world,
				.job = "comm-staged-test",
				.secret = "comm-staged-test-secret",
				.timeout_s = TIMEOUT_S};
	struct comm_cpu_opts co = {.timeout_s = TIMEOUT_S};
	struct comm_stage stg = {.ctx = d, .is_device = fake_is_device, .copy = fake_copy};
	struct comm *in;
	struct dp_error err;
	if (store_open(st, &so, &err) < 0)
		return ranks_msg(msg, len, &err);
	if (comm_cpu_create(&in, *st, &co, &err) < 0 || comm_staged_create(c, in, &stg, &err) < 0) {
		store_close(*st, 1);
		return ranks_msg(msg, len, &err);
	}
	return 0;
}

/* p[0..n): a rank's and salt's own sequence of values in [-8, 8) as type t (an LCG). */
static void fill(void *p, size_t n, enum comm_dtype t, int rank, int salt)
{
	uint64_t x = (uint64_t)(rank + 1) << 32 | (uint32_t)salt;
	for (size_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		double v =
		    ((double)(x >> 11) / 9007199254740992.0 * 2 - 1) * (double)(1 + (x >> 61));
		if (t == COMM_F64)
			((double *)p)[i] = v;
		else
			((float *)p)[i] = (float)v;
	}
}

/* What went wrong first, and a count of the checks. */
struct check {
	char *msg;
	size_t len;
	int failed, n;
};

static void bad(struct check *k, const char *fmt, const char *what, const char *err)
{
	if (!k->failed++)
		snprintf(k->msg, k->len, fmt, what, err);
}

/* Every operation twice: on host buffers (the CPU engine as it is) and staged from the arena;
 * the same bits, and the copies each staged one must make. */
static int rank_ops(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	const size_t counts[] = {1, 1000, 100003};
	int w = j->world;
	size_t most = 100003 * (size_t)(w + 1) * 8; /* a whole buffer and one block */
	struct fake_dev d = {.size = 2 * most};
	struct store *st;
	struct comm *c;
	struct check k = {msg, len, 0, 0};
	struct dp_error err;
	if (!(d.lo = malloc(d.size)))
		return snprintf(msg, len, "out of memory"), -1;
	if (open_staged(j, rank, &d, &st, &c, msg, len) < 0)
		return -1;
	const char *suffix = ", staged through host memory", *name = c->ops->name;
	if (strncmp(name, "cpu", 3) != 0 || strlen(name) < strlen(suffix) ||
	    strcmp(name + strlen(name) - strlen(suffix), suffix) != 0)
		bad(&k, "%s: %s", "name", c->ops->name);
	unsigned char *host = malloc(most), *host2 = malloc(most);
	unsigned char *dev = d.lo, *dev2 = d.lo + most;
	for (size_t ci = 0; ci < 3 && !k.failed; ci++) {
		size_t n = counts[ci];
		for (int t = COMM_F32; t <= COMM_F64 && !k.failed; t++) {
			size_t es = comm_dtype_size(t), whole = n * es * (size_t)w;
			for (int op = COMM_SUM; op <= COMM_AVG; op++) {
				long out0 = d.copies_out, in0 = d.copies_in;
				fill(host, n, t, rank, 1 + op);
				fill(dev, n, t, rank, 1 + op);
				if (c->ops->allreduce(c, host, n, t, op, &err) < 0 ||
				    c->ops->allreduce(c, dev, n, t, op, &err) < 0) {
					bad(&k, "%s: %s", "allreduce", err.text);
					break;
				}
				if (memcmp(host, dev, n * es) != 0)
					bad(&k, "%s%s",
					    "allreduce: the staged bits differ from the host's",
					    "");
				if (d.copies_out != out0 + 1 || d.copies_in != in0 + 1)
					bad(&k, "%s%s", "allreduce: not one copy each way", "");
				k.n++;
			}
			/* reduce_scatter and allgather: device memory on each side, and on both */
			for (int sides = 1; sides <= 3 && !k.failed; sides++) {
				int din = sides & 1, dout = sides & 2;
				fill(host, n * (size_t)w, t, rank, 7);
				memcpy(din ? dev : host2, host, whole);
				unsigned char *rin = din ? dev : host2,
					      *rout = dout ? dev2 : host2 + whole;
				if (c->ops->reduce_scatter(c, host, host + whole, n, t, COMM_SUM,
							   &err) < 0 ||
				    c->ops->reduce_scatter(c, rin, rout, n, t, COMM_SUM, &err) <
					0) {
					bad(&k, "%s: %s", "reduce_scatter", err.text);
					break;
				}
				if (memcmp(host + whole, rout, n * es) != 0)
					bad(&k, "%s%s",
					    "reduce_scatter: the staged bits differ from the "
					    "host's",
					    "");
				fill(host, n, t, rank, 8);
				memcpy(din ? dev : host2, host, n * es);
				rin = din ? dev : host2;
				rout = dout ? dev2 : host2 + n * es;
				if (c->ops->allgather(c, host, host + n * es, n, t, &err) < 0 ||
				    c->ops->allgather(c, rin, rout, n, t, &err) < 0) {
					bad(&k, "%s: %s", "allgather", err.text);
					break;
				}
				if (memcmp(host + n * es, rout, whole) != 0)
					bad(&k, "%s%s",
					    "allgather: the staged bits differ from the host's",
					    "");
				k.n += 2;
			}
			for (int root = 0; root < w && !k.failed; root++) {
				long out0 = d.copies_out, in0 = d.copies_in;
				fill(host, n, t, rank, 9 + root);
				memcpy(dev, host, n * es);
				if (c->ops->broadcast(c, host, n * es, root, &err) < 0 ||
				    c->ops->broadcast(c, dev, n * es, root, &err) < 0) {
					bad(&k, "%s: %s", "broadcast", err.text);
					break;
				}
				if (memcmp(host, dev, n * es) != 0)
					bad(&k, "%s%s",
					    "broadcast: the staged bits differ from the host's",
					    "");
				/* the root copies out, the others copy in */
				if (d.copies_out - out0 != (rank == root) ||
				    d.copies_in - in0 != (rank != root))
					bad(&k, "%s%s", "broadcast: copies the wrong way", "");
				k.n++;
			}
		}
	}
	if (!k.failed && c->ops->barrier(c, &err) < 0)
		bad(&k, "%s: %s", "barrier", err.text);
	c->ops->destroy(c);
	store_close(st, 10);
	free(host);
	free(host2);
	free(d.lo);
	if (!k.failed)
		snprintf(msg, len, "%d checks", k.n);
	return k.failed ? -1 : 0;
}

/* One rank's copy fails: "<its message>|<the message of the call after it>". */
static int rank_fail(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	const struct job *s = j->arg;
	struct fake_dev d = {.size = 1 << 16};
	struct store *st;
	struct comm *c;
	struct dp_error err, again;
	if (!(d.lo = malloc(d.size)))
		return snprintf(msg, len, "out of memory"), -1;
	if (rank == s->fail_rank)
		d.fail_at = s->fail_at;
	if (open_staged(j, rank, &d, &st, &c, msg, len) < 0)
		return -1;
	int rv = -1;
	double t0 = ranks_now();
	for (int i = 0; i < 20; i++) {
		memset(d.lo, 0, 4096);
		if (c->ops->allreduce(c, d.lo, 1024, COMM_F32, COMM_SUM, &err) < 0) {
			c->ops->allreduce(c, d.lo, 1024, COMM_F32, COMM_SUM, &again);
			snprintf(msg, len, "%.2f|%s|%s", ranks_now() - t0, err.text, again.text);
			rv = 0;
			break;
		}
	}
	if (rv < 0)
		snprintf(msg, len, "no failure in 20 allreduces");
	c->ops->destroy(c);
	store_close(st, 2);
	free(d.lo);
	return rv;
}

int main(void)
{
	struct ranks_out out[RANKS_MAX];
	for (int w = 1; w <= 3; w++) {
		struct ranks_job j = {.world = w};
		ranks_run(&j, rank_ops, -1, 120, out);
		for (int r = 0; r < w; r++)
			if (!ok(out[r].status == 0,
				"world %d rank %d: every staged operation has the host's bits (%s)",
				w, r, out[r].msg))
				diag("rank %d: %s", r, out[r].msg);
	}
	/* rank 1's third copy fails (its second allreduce's copy out: the others wait in it), or
	 * its fourth (that allreduce's copy back: the others have gone on to the next one) */
	static const struct job fail_back = {1, 4}, fail_out = {1, 3};
	const struct job *fails[] = {&fail_out, &fail_back};
	const char *ways[] = {"from", "back to"};
	for (int f = 0; f < 2; f++) {
		struct ranks_job j = {.world = 3, .arg = fails[f]};
		ranks_run(&j, rank_fail, -1, 60, out);
		for (int r = 0; r < 3; r++) {
			const char *m = out[r].msg;
			ok(out[r].status == 0 && strchr(m, '|'),
			   "copy %s the GPU fails on rank 1: rank %d failed (%s)", ways[f], r, m);
			like(m, "rank 1: allreduce: staging 4096 bytes",
			     "... rank %d's message names rank 1 and the copy", r);
			like(m, "the test's copy", "... and says why (rank %d)", r);
			ok(atof(m) < TIMEOUT_S / 2,
			   "... long before the %d s timeout (rank %d: %.2f s)", TIMEOUT_S, r,
			   atof(m));
		}
		diag("%s", out[0].msg);
	}
	return done_testing();
}
