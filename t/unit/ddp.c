/* ddp.c — the DDP layer alone, over a recording comm that stands in for the ranks (the real
 * collectives are t/unit/comm.c, the real data-parallel runs t/t0700-ddp.t): the bucket
 * plan (caps, the smaller first bucket, all_reduce_fusion_config, errors), bucket order,
 * reduction during backward, sum vs mean, and no communication on accumulation micro-steps. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/backend/backend.h"
#include "trainer/dist/comm.h"
#include "trainer/dist/ddp.h"
#include "trainer/nn/nn.h"
#include "t/lib/tap.h"

#define MAXCALLS 256

/* A comm of `fake_world` identical ranks: a sum multiplies by fake_world, an average keeps. */
struct rec_comm {
	struct comm c;
	int fake_world;
	atomic_int in_backward; /* set by the test around nn_backward */
	int ncalls;
	struct {
		size_t offset, count;
		int during_backward;
	} call[MAXCALLS];
	float *base;
};

static int rec_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype t,
			 enum comm_redop op, struct dp_error *err)
{
	struct rec_comm *r = (struct rec_comm *)c;
	(void)err;

	if (t == COMM_F32 && r->ncalls < MAXCALLS) {
		r->call[r->ncalls].offset = (size_t)((float *)buf - r->base);
		r->call[r->ncalls].count = count;
		r->call[r->ncalls].during_backward = atomic_load(&r->in_backward);
		r->ncalls++;
	}
	if (op == COMM_SUM && t == COMM_F32)
		for (size_t i = 0; i < count; i++)
			((float *)buf)[i] *= (float)r->fake_world;
	return 0;
}

static int rec_broadcast(struct comm *c, void *buf, size_t bytes, int root, struct dp_error *err)
{
	(void)c, (void)buf, (void)bytes, (void)root, (void)err;
	return 0;
}

static void rec_abort(struct comm *c, const char *reason)
{
	(void)c, (void)reason;
}

static const struct comm_ops rec_ops = {
    .name = "recording",
    .allreduce = rec_allreduce,
    .broadcast = rec_broadcast,
    .abort = rec_abort,
};

static struct backend *be;

static uint64_t rs = 777;
static float urand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (float)((double)(rs >> 11) / 9007199254740992.0);
}

static int build(struct nn_model *m, const char *name)
{
	struct dp_error err;
	struct nn_spec s = {.name = name, .c = 1, .h = 28, .w = 28, .classes = 10};
	if (nn_build(m, be, &s, &err) < 0 || nn_init_weights(m, 1, &err) < 0 ||
	    nn_reserve(m, 32, &err) < 0) {
		diag("%s", err.text);
		return -1;
	}
	return 0;
}

/* Buckets tile [0, param_total), start at parameter boundaries, respect the caps. */
static void check_plan(struct ddp *d, struct nn_model *m, size_t first_cap, size_t cap,
		       const char *what)
{
	int nb = ddp_bucket_count(d), good = 1;
	size_t at = 0;
	for (int i = 0; i < nb; i++) {
		const struct ddp_bucket *b = ddp_bucket(d, i);
		size_t lim = i == 0 ? first_cap : cap;
		int single = b->first == b->last;
		if (b->lo != at || b->hi <= b->lo)
			good = 0;
		if (!single && (b->hi - b->lo) * sizeof(float) > lim + 64) /* alignment padding */
			good = 0;
		int on_boundary = i == 0;
		for (int p = 0; p < m->nparams; p++)
			if (m->params[p].offset == b->lo)
				on_boundary = 1;
		good &= on_boundary;
		at = b->hi;
	}
	ok(good && at == m->param_total + 1,
	   "%s: %d buckets tile the gradient buffer (and the "
	   "vote after it) at parameter boundaries within their caps",
	   what, nb);
}

static void plans(void)
{
	struct nn_model m;
	struct rec_comm rc = {.c = {.ops = &rec_ops, .rank = 0, .world_size = 2}, .fake_world = 2};
	struct ddp *d;
	struct dp_error err;
	if (build(&m, "mlp") < 0)
		return;
	rc.base = m.grads;
	struct ddp_opts o = {.gradients_mean = 1,
			     .bucket_bytes = 25u << 20,
			     .first_bucket_bytes = DDP_FIRST_BUCKET_BYTES};
	ok(ddp_create(&d, &m, &rc.c, &o, &err) == 0, "create: %s", err.text);
	/* mlp: fc3 (20 KB) fits the 1 MiB first bucket, fc2 (1 MiB) does not; fc2 + fc1 (1.6 MB)
	 * fit the 25 MB one */
	is_int(ddp_bucket_count(d), 2, "mlp at 25 MB with a 1 MiB first bucket: 2 buckets");
	check_plan(d, &m, DDP_FIRST_BUCKET_BYTES, 25u << 20, "mlp 25 MB");
	ddp_destroy(d);

	o.bucket_bytes = 64 << 10;
	o.first_bucket_bytes = 16 << 10;
	ok(ddp_create(&d, &m, &rc.c, &o, &err) == 0, "create small buckets");
	check_plan(d, &m, 16 << 10, 64 << 10, "mlp 64 KB");
	ok(ddp_bucket(d, 0)->first == 0 && ddp_bucket(d, 0)->last == 0,
	   "the first bucket holds only fc3.bias (fc3.weight would pass 16 KB)");
	ddp_destroy(d);

	static const int split[] = {2, 5};
	o.fusion_split = split;
	o.nfusion_split = 2;
	ok(ddp_create(&d, &m, &rc.c, &o, &err) == 0, "create with fusion config");
	ok(ddp_bucket_count(d) == 3 && ddp_bucket(d, 0)->last == 1 &&
	       ddp_bucket(d, 1)->first == 2 && ddp_bucket(d, 1)->last == 4 &&
	       ddp_bucket(d, 2)->first == 5 && ddp_bucket(d, 2)->last == m.nparams - 1,
	   "all_reduce_fusion_config [2, 5]: parameters 0-1, 2-4, 5-%d", m.nparams - 1);
	ddp_destroy(d);

	static const int bad[] = {3, 6};
	o.fusion_split = bad;
	ok(ddp_create(&d, &m, &rc.c, &o, &err) < 0, "split index past the end refused");
	like(err.text, "all_reduce_fusion_config: split index 6, but mlp has 6 parameters",
	     "the error names the key, the index and the model's count");
	nn_free(&m);
}

/* A backend copy that fails, as a device copy can. */
static int fail_copy(struct backend *b, void *dst, const void *src, size_t bytes)
{
	(void)dst;
	(void)src;
	(void)bytes;
	errprintf(&b->err, "injected copy failure");
	return -1;
}

/* One step: forward, loss, backward with DDP; returns the number of allreduce calls. */
static int step(struct nn_model *m, struct ddp *d, struct rec_comm *rc, int sync, float beta,
		const float *x, const int32_t *y, int n)
{
	struct dp_error err;
	float *logits, loss;
	int okc, before = rc->ncalls;
	if (nn_forward(m, x, n, &logits, &err) < 0 ||
	    nn_loss(m, y, n, 0, 1, &loss, &okc, &err) < 0) {
		diag("%s", err.text);
		return -1;
	}
	if (ddp_begin_backward(d, sync, &err) < 0) {
		diag("%s", err.text);
		return -1;
	}
	atomic_store(&rc->in_backward, 1);
	int rv = nn_backward(m, n, beta, &err);
	atomic_store(&rc->in_backward, 0);
	if (rv < 0 || (sync && ddp_finish(d, &err) < 0)) {
		diag("%s", err.text);
		return -1;
	}
	return rc->ncalls - before;
}

static void reduction(void)
{
	struct nn_model m;
	struct rec_comm rc = {.c = {.ops = &rec_ops, .rank = 0, .world_size = 2}, .fake_world = 2};
	struct ddp *d;
	struct dp_error err;
	enum { N = 32 };
	float *x = malloc(sizeof(float) * N * 784);
	int32_t y[N];
	for (int i = 0; i < N * 784; i++)
		x[i] = urand();
	for (int i = 0; i < N; i++)
		y[i] = i % 10;
	if (build(&m, "lenet") < 0)
		return;
	rc.base = m.grads;
	float *plain = malloc(sizeof(float) * m.param_total);
	/* gradients without DDP */
	float *logits, loss;
	int okc;
	nn_forward(&m, x, N, &logits, &err);
	nn_loss(&m, y, N, 0, 1, &loss, &okc, &err);
	nn_backward(&m, N, 0, &err);
	memcpy(plain, m.grads, sizeof(float) * m.param_total);

	struct ddp_opts o = {
	    .gradients_mean = 0, .bucket_bytes = 16 << 10, .first_bucket_bytes = 4 << 10};
	ok(ddp_create(&d, &m, &rc.c, &o, &err) == 0, "create");
	int nb = ddp_bucket_count(d);
	int calls = step(&m, d, &rc, 1, 0, x, y, N);
	is_int(calls, nb, "one allreduce per bucket (%d)", nb);
	int ordered = 1;
	for (int i = 0; i < nb && i < calls; i++)
		ordered &= rc.call[i].offset == ddp_bucket(d, i)->lo &&
			   rc.call[i].count == ddp_bucket(d, i)->hi - ddp_bucket(d, i)->lo;
	ok(ordered, "buckets reduced in index order, each over its range");
	int same = 1;
	for (size_t i = 0; i < m.param_total; i++)
		same &= m.grads[i] == 2 * plain[i];
	ok(same, "gradients_mean false: the sum over 2 ranks (each gradient doubled)");
	float votes = -1;
	ddp_set_vote(d, 1.0f);
	step(&m, d, &rc, 1, 0, x, y, N);
	ok(ddp_votes(d, &votes, &err) == 0, "the votes are read back");
	is_double(votes, 2.0, 0, "a vote travels with the last bucket (summed: 2 ranks)");
	ddp_set_vote(d, 0.0f);
	step(&m, d, &rc, 1, 0, x, y, N);
	ok(ddp_votes(d, &votes, &err) == 0, "the votes are read back");
	is_double(votes, 0.0, 0, "... and no vote is 0");

	/* A device that fails to take the vote, or to give the votes back: an error naming
	 * it, never a vote lost as "no vote" (the stop request of another rank). */
	struct backend_ops failing = *be->ops;
	const struct backend_ops *real = be->ops;
	failing.from_host = fail_copy;
	be->ops = &failing;
	ddp_set_vote(d, 1.0f);
	ok(ddp_begin_backward(d, 1, &err) < 0, "a vote the device does not take fails");
	like(err.text, "ddp: cannot put this rank's stop vote on cpu: injected copy failure",
	     "... naming the vote, the backend and its error");
	be->ops = real;
	step(&m, d, &rc, 1, 0, x, y, N);
	failing = *be->ops;
	failing.to_host = fail_copy;
	be->ops = &failing;
	votes = -1;
	ok(ddp_votes(d, &votes, &err) < 0 && votes == 0,
	   "votes the device does not give back fail (not 'no vote')");
	like(err.text, "ddp: cannot read the ranks' stop votes from cpu: injected copy failure",
	     "... naming the votes, the backend and its error");
	be->ops = real;

	/* Overlap: with small buckets the first one is reduced while backward still runs. The
	 * communication thread is woken by a condition variable, so allow a few tries on a
	 * loaded machine. */
	int overlapped = 0;
	for (int t = 0; t < 20 && !overlapped; t++) {
		int before = rc.ncalls;
		if (step(&m, d, &rc, 1, 0, x, y, N) < 0)
			break;
		overlapped = before < MAXCALLS && rc.call[before].during_backward;
		if (rc.ncalls > MAXCALLS - 2 * nb)
			rc.ncalls = 0;
	}
	ok(overlapped, "the first bucket is reduced while backward is still running");

	/* accumulation: micro-steps without sync communicate nothing */
	rc.ncalls = 0;
	int c1 = step(&m, d, &rc, 0, 0, x, y, N);
	int c2 = step(&m, d, &rc, 0, 1, x, y, N);
	int c3 = step(&m, d, &rc, 1, 1, x, y, N);
	ok(c1 == 0 && c2 == 0 && c3 == nb,
	   "3 accumulation micro-steps: no allreduce, no allreduce, then %d (got %d %d %d)", nb, c1,
	   c2, c3);
	same = 1;
	for (size_t i = 0; i < m.param_total; i++)
		same &= fabsf(m.grads[i] - 6 * plain[i]) <= 1e-5f * (1 + fabsf(6 * plain[i]));
	ok(same, "after 3 micro-steps the reduced gradient is the sum of the three (x 2 ranks)");
	ddp_destroy(d);

	o.gradients_mean = 1;
	ok(ddp_create(&d, &m, &rc.c, &o, &err) == 0, "create (mean)");
	step(&m, d, &rc, 1, 0, x, y, N);
	same = 1;
	for (size_t i = 0; i < m.param_total; i++)
		same &= m.grads[i] == plain[i];
	ok(same, "gradients_mean true: the average of identical ranks is the gradient itself");
	ddp_destroy(d);
	ok(m.hook == NULL, "ddp_destroy removes its gradient hook");
	free(plain);
	free(x);
	nn_free(&m);
}

int main(void)
{
	struct dp_error err;
	be = be_cpu_create(1, &err);
	if (!be)
		bail_out("cpu backend: %s", err.text);
	plans();
	reduction();
	be->ops->destroy(be);
	return done_testing();
}
