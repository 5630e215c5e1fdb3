/* loader.c — unit tests for trainer/data/loader.c: batches identical for 0, 1 and 3 workers, their
 * content from sampler + dataset + transform, drop_remainder, resume mid-epoch, N ranks ==
 * 1 rank, shutdown at any point, errors from workers, held buffers, the caller's allocator,
 * encoded images (a bad one replaced by the next, warned about once, data.max_bad), and one
 * epoch of the real Fashion-MNIST. `loader.t --bench` times Fashion-MNIST loading. */
#include "common/error.h"
#include "trainer/data/loader.h"
#include "t/lib/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <png.h>

#define FMNIST "/usr/share/datasets/fashion-mnist"

/* Every batch of a run, copied. */
struct run {
	int nbatches;
	struct loader_batch meta[256];
	float *x[256];
	int32_t *y[256];
	size_t elems; /* floats per sample */
	struct dp_error err;
	int rc; /* loader_next's last return */
};

static void run_free(struct run *r)
{
	for (int i = 0; i < r->nbatches; i++) {
		free(r->x[i]);
		free(r->y[i]);
	}
	r->nbatches = 0;
}

/* Drains the current epoch into r (appending). */
static void drain(struct loader *l, struct run *r)
{
	struct loader_batch *b;

	while ((r->rc = loader_next(l, &b, &r->err)) == 1) {
		int k = r->nbatches++;
		if (k >= 256)
			bail_out("too many batches");
		r->meta[k] = *b;
		r->x[k] = malloc((size_t)b->n * r->elems * sizeof(float));
		r->y[k] = malloc((size_t)b->n * sizeof(int32_t));
		memcpy(r->x[k], b->x, (size_t)b->n * r->elems * sizeof(float));
		memcpy(r->y[k], b->y, (size_t)b->n * sizeof(int32_t));
		loader_release(l, b);
	}
}

static int batch_equal(const struct run *a, int i, const struct run *b, int j)
{
	const struct loader_batch *p = &a->meta[i], *q = &b->meta[j];

	return p->n == q->n && p->epoch == q->epoch && p->step == q->step &&
	       p->next_offset == q->next_offset &&
	       memcmp(a->x[i], b->x[j], (size_t)p->n * a->elems * sizeof(float)) == 0 &&
	       memcmp(a->y[i], b->y[j], (size_t)p->n * sizeof(int32_t)) == 0;
}

static int runs_equal(const struct run *a, const struct run *b)
{
	if (a->nbatches != b->nbatches)
		return 0;
	for (int i = 0; i < a->nbatches; i++)
		if (!batch_equal(a, i, b, i))
			return 0;
	return 1;
}

static const struct tf_spec aug = {.crop = 8,
				   .pad = 2,
				   .flip_p = 0.5,
				   .seed = 5,
				   .mean = {0.5f, 0.4f, 0.3f},
				   .std = {0.2f, 0.25f, 0.3f}};

/* Epochs `e0`, `e0+1` of a synthetic 3x8x8 set of n samples on rank `rank` of `world`. */
static void run_epochs(struct run *r, const struct data_set *ds, int world, int rank, int drop,
		       int batch, int workers, int prefetch, int64_t e0, int epochs)
{
	struct sampler s;
	struct tf t;
	struct loader *l;
	struct loader_opts o = {
	    .batch_size = batch, .drop_remainder = drop, .workers = workers, .prefetch = prefetch};
	struct dp_error err;

	memset(r, 0, sizeof(*r));
	if (sampler_init(&s, ds->count, world, rank, true, 77, drop, &err) != 0 ||
	    tf_init(&t, &aug, ds->channels, ds->height, ds->width, &err) != 0 ||
	    loader_create(&l, ds, &s, &t, &o, &err) != 0)
		bail_out("setup: %s", err.text);
	r->elems = tf_out_elems(&t);
	for (int e = 0; e < epochs; e++) {
		if (loader_start_epoch(l, e0 + e, 0, &err) != 0)
			bail_out("start_epoch: %s", err.text);
		drain(l, r);
	}
	loader_destroy(l);
	sampler_free(&s);
}

static void test_workers(const struct data_set *ds)
{
	struct run a, b, c, d;

	run_epochs(&a, ds, 2, 1, 0, 10, 0, 0, 0, 2);
	run_epochs(&b, ds, 2, 1, 0, 10, 1, 1, 0, 2);
	run_epochs(&c, ds, 2, 1, 0, 10, 3, 0, 0, 2);
	run_epochs(&d, ds, 2, 1, 0, 10, 3, 7, 0, 2);
	ok(a.nbatches == 12 && a.rc == 0, "2 epochs of 52 samples at batch 10: 12 batches (%d)",
	   a.nbatches);
	ok(runs_equal(&a, &b), "workers 1 (prefetch 1) == workers 0, bytewise");
	ok(runs_equal(&a, &c), "workers 3 == workers 0, bytewise");
	ok(runs_equal(&a, &d), "workers 3, prefetch 7 == workers 0, bytewise");
	ok(a.meta[5].n == 2 && a.meta[4].n == 10, "short last batch (2 samples) without "
						  "drop_remainder");
	ok(a.meta[0].epoch == 0 && a.meta[6].epoch == 1 && a.meta[6].step == 0 &&
	       a.meta[5].step == 5,
	   "epoch and step numbering");
	ok(a.meta[0].next_offset == 20 && a.meta[5].next_offset == 104,
	   "next_offset = (samples consumed per rank) * world size");

	/* Content: sample i of batch b is the transform of sampler index b*B+i. */
	{
		struct sampler s;
		struct tf t;
		struct dp_error err;
		uint8_t scratch[192];
		float want[192];
		int same = 1;

		sampler_init(&s, ds->count, 2, 1, true, 77, false, &err);
		tf_init(&t, &aug, 3, 8, 8, &err);
		for (int bi = 6; bi < 12; bi++) {
			sampler_set_epoch(&s, 1);
			for (int i = 0; i < a.meta[bi].n; i++) {
				size_t idx = sampler_index(&s, (size_t)(bi - 6) * 10 + (size_t)i);
				const uint8_t *px;
				int label;
				data_get(ds, idx, scratch, &px, &label, &err);
				tf_apply(&t, 1, idx, px, want);
				same &=
				    memcmp(want, a.x[bi] + (size_t)i * 192, sizeof(want)) == 0 &&
				    a.y[bi][i] == label;
			}
		}
		ok(same,
		   "batch contents: transform(dataset[sampler index]) with (epoch, index) draws");
		sampler_free(&s);
	}
	run_free(&a);
	run_free(&b);
	run_free(&c);
	run_free(&d);

	run_epochs(&a, ds, 2, 1, 1, 10, 2, 0, 0, 1);
	ok(a.nbatches == 5 && a.meta[4].n == 10,
	   "drop_remainder: 51 samples per rank (sampler drop_last) -> 5 full batches");
	run_free(&a);
}

static void test_resume(const struct data_set *ds)
{
	struct run full, part;
	struct sampler s;
	struct tf t;
	struct loader *l;
	struct loader_opts o = {.batch_size = 7, .workers = 2};
	struct dp_error err;
	int tails_ok = 1;

	run_epochs(&full, ds, 3, 2, 0, 7, 2, 0, 4, 1);
	sampler_init(&s, ds->count, 3, 2, true, 77, false, &err);
	tf_init(&t, &aug, 3, 8, 8, &err);
	loader_create(&l, ds, &s, &t, &o, &err);
	for (int k = 0; k <= full.nbatches; k++) {
		size_t start = k ? full.meta[k - 1].next_offset : 0;

		memset(&part, 0, sizeof(part));
		part.elems = full.elems;
		loader_start_epoch(l, 4, start, &err);
		drain(l, &part);
		if (part.nbatches != full.nbatches - k)
			tails_ok = 0;
		for (int i = 0; tails_ok && i < part.nbatches; i++)
			tails_ok &= batch_equal(&part, i, &full, k + i);
		run_free(&part);
	}
	ok(full.nbatches == 5, "35 samples per rank of 103 on 3 ranks: 5 batches of 7");
	ok(tails_ok, "resume after k batches (k = 0..5) == the tail of the full epoch, steps and "
		     "offsets included");

	/* Abandon an epoch half-way, start another: as if fresh. */
	{
		struct loader_batch *b;
		struct run again;

		loader_start_epoch(l, 4, 0, &err);
		loader_next(l, &b, &err);
		loader_release(l, b);
		loader_next(l, &b, &err);
		loader_release(l, b);
		memset(&again, 0, sizeof(again));
		again.elems = full.elems;
		ok(loader_start_epoch(l, 4, 0, &err) == 0, "start_epoch mid-epoch (%s)", err.text);
		drain(l, &again);
		ok(runs_equal(&again, &full), "an abandoned epoch leaves no trace in the next");
		run_free(&again);
	}
	loader_destroy(l);
	sampler_free(&s);
	run_free(&full);
}

/* W ranks at batch B see, step by step, the samples one rank sees at batch W*B. */
static void test_ranks_vs_one(const struct data_set *ds)
{
	struct run one, ranks[4];
	int same = 1;
	const int W = 4, B = 3;

	run_epochs(&one, ds, 1, 0, 1, W * B, 0, 0, 2, 1);
	for (int r = 0; r < W; r++)
		run_epochs(&ranks[r], ds, W, r, 1, B, r % 3, 0, 2, 1);
	for (int st = 0; st < one.nbatches; st++) {
		for (int i = 0; i < W * B; i++) {
			/* global position p = st*W*B + i belongs to rank p % W, its j = p / W */
			int p = st * W * B + i, r = p % W, j = p / W - st * B;
			const struct run *rr = &ranks[r];
			if (st >= rr->nbatches || rr->meta[st].n != B ||
			    memcmp(one.x[st] + (size_t)i * one.elems,
				   rr->x[st] + (size_t)j * one.elems,
				   one.elems * sizeof(float)) != 0 ||
			    one.y[st][i] != rr->y[st][j])
				same = 0;
		}
	}
	ok(one.nbatches == 8 && ranks[3].nbatches == 8, "96 of 103 samples: 8 steps either way");
	ok(same, "4 ranks at batch 3 == 1 rank at batch 12, sample for sample, bytewise");
	run_free(&one);
	for (int r = 0; r < W; r++)
		run_free(&ranks[r]);
}

static void test_shutdown(const struct data_set *ds)
{
	struct sampler s;
	struct tf t;
	struct dp_error err;
	struct loader_opts o = {.batch_size = 5, .workers = 3, .prefetch = 4};
	int ok_all = 1;

	sampler_init(&s, ds->count, 1, 0, true, 1, false, &err);
	tf_init(&t, &aug, 3, 8, 8, &err);
	for (int it = 0; it < 60; it++) {
		struct loader *l;
		struct loader_batch *b;

		if (loader_create(&l, ds, &s, &t, &o, &err) != 0) {
			ok_all = 0;
			break;
		}
		if (it % 3 > 0)
			loader_start_epoch(l, it, 0, &err);
		/* take up to 4 batches, keep every other: never more held than buffers */
		for (int k = 0; k < (it % 3 == 2 ? it % 5 : 0); k++) {
			if (loader_next(l, &b, &err) != 1) {
				ok_all = 0;
				break;
			}
			if (k % 2)
				loader_release(l, b); /* others are still held at destroy */
		}
		if (it % 5 == 0)
			usleep(1000); /* let the workers get busy */
		loader_destroy(l);
	}
	ok(ok_all, "destroy right after create, after start, mid-epoch with batches held: no "
		   "hang, no leak");
	loader_destroy(NULL);
	sampler_free(&s);
}

static int failing_get(const struct data_set *ds, size_t i, uint8_t *scratch,
		       const uint8_t **pixels, int *label, struct dp_error *err)
{
	if (i == 17) {
		errprintf(err, "%s: sample 17 cannot be read", ds->name);
		return -1;
	}
	memset(scratch, (int)i, ds->image_bytes);
	*pixels = scratch;
	*label = (int)(i % 10);
	return 0;
}

static void test_errors(const struct data_set *ds)
{
	static const struct data_ops fops = {.get = failing_get};
	struct data_set bad = {.ops = &fops,
			       .kind = "test",
			       .name = "flaky",
			       .count = 40,
			       .channels = 1,
			       .height = 2,
			       .width = 2,
			       .num_classes = 10,
			       .image_bytes = 4};
	struct sampler s;
	struct tf t;
	struct loader *l;
	struct dp_error err;
	struct tf_spec plain = {0};

	sampler_init(&s, 40, 1, 0, false, 0, false, &err);
	tf_init(&t, &plain, 1, 2, 2, &err);
	for (int workers = 0; workers <= 2; workers += 2) {
		struct loader_opts o = {.batch_size = 5, .workers = workers};
		struct run r;

		memset(&r, 0, sizeof(r));
		r.elems = 4;
		loader_create(&l, &bad, &s, &t, &o, &err);
		loader_start_epoch(l, 0, 0, &err);
		drain(l, &r);
		ok(r.rc == -1 && r.nbatches == 3, "workers %d: batches 0-2 arrive, batch 3 fails",
		   workers);
		is(r.err.text, "flaky: sample 17 cannot be read", "... with the worker's message");
		{
			struct loader_batch *b;
			ok(loader_next(l, &b, &err) == -1 && b == NULL, "... and keeps failing");
		}
		ok(loader_start_epoch(l, 1, 20, &err) == 0,
		   "a new epoch past the bad sample starts");
		drain(l, &r);
		ok(r.rc == 0 && r.nbatches == 7, "... and delivers its 4 batches");
		run_free(&r);
		loader_destroy(l);
	}
	sampler_free(&s);

	/* batch size larger than a rank's share with drop_remainder */
	{
		struct data_set syn;
		struct loader_opts o = {.batch_size = 512, .drop_remainder = true};

		data_synthetic(&syn, 1000, 1, 2, 2, 10, 1, &err);
		sampler_init(&s, 1000, 4, 3, true, 0, true, &err);
		ok(loader_create(&l, &syn, &s, &t, &o, &err) == -1 && l == NULL,
		   "batch 512 > 250 samples per rank with drop_remainder refused");
		is(err.text,
		   "data.batch_size 512 is larger than the 250 samples rank 3 gets per epoch with "
		   "drop_remainder; lower the batch size or set drop_remainder false",
		   "... message");
		o.drop_remainder = false;
		ok(loader_create(&l, &syn, &s, &t, &o, &err) == 0,
		   "... fine without drop_remainder");
		loader_start_epoch(l, 0, 0, &err);
		ok(loader_batches(l) == 1, "... one short batch");
		loader_destroy(l);
		sampler_free(&s);
		data_free(&syn);
	}

	/* options, mismatches, misuse */
	sampler_init(&s, ds->count, 1, 0, true, 0, false, &err);
	tf_init(&t, &aug, 3, 8, 8, &err);
	{
		struct loader_opts o = {.batch_size = 0};
		ok(loader_create(&l, ds, &s, &t, &o, &err) == -1, "batch size 0 refused");
		like(err.text, "need batch size >= 1", "... message");
	}
	{
		struct tf t2;
		struct loader_opts o = {.batch_size = 4};
		tf_init(&t2, &plain, 1, 8, 8, &err);
		ok(loader_create(&l, ds, &s, &t2, &o, &err) == -1,
		   "transform for other images refused");
		like(err.text, "loader: the transform is set up for 1x8x8 images but synthetic",
		     "... "
		     "message");
	}
	{
		struct loader_opts o = {.batch_size = 4, .workers = 1, .prefetch = 2};
		struct loader_batch *b1, *b2, *b3;

		loader_create(&l, ds, &s, &t, &o, &err);
		ok(loader_next(l, &b1, &err) == -1, "loader_next before start_epoch refused");
		is(err.text, "loader: no epoch started (loader_start_epoch)", "... message");
		loader_start_epoch(l, 0, 0, &err);
		loader_next(l, &b1, &err);
		loader_next(l, &b2, &err);
		ok(loader_next(l, &b3, &err) == -1,
		   "a third batch while both buffers are held: error");
		is(err.text,
		   "loader: all 2 prefetch buffers are held; release a batch before asking for the "
		   "next",
		   "... message (not a hang)");
		ok(loader_start_epoch(l, 1, 0, &err) == -1,
		   "start_epoch with batches held refused");
		like(err.text, "is still held; release every batch before starting an epoch",
		     "... message");
		loader_release(l, b2);
		loader_release(l, b1);
		ok(loader_next(l, &b3, &err) == 1 && b3->step == 2,
		   "after release, batch 2 arrives");
		loader_release(l, b3);
		loader_destroy(l);
	}
	sampler_free(&s);
}

struct counting {
	int allocs, frees;
	size_t bytes;
};

static void *count_alloc(void *ctx, size_t n)
{
	struct counting *c = ctx;
	c->allocs++;
	c->bytes += n;
	return malloc(n);
}

static void count_free(void *ctx, void *p)
{
	((struct counting *)ctx)->frees++;
	free(p);
}

static void test_allocator(const struct data_set *ds)
{
	struct counting c = {0};
	struct sampler s;
	struct tf t;
	struct loader *l;
	struct loader_batch *b;
	struct dp_error err;
	struct loader_opts o = {.batch_size = 6,
				.workers = 2,
				.prefetch = 3,
				.alloc = {.alloc = count_alloc, .free = count_free, .ctx = &c}};

	sampler_init(&s, ds->count, 1, 0, true, 0, false, &err);
	tf_init(&t, &aug, 3, 8, 8, &err);
	loader_create(&l, ds, &s, &t, &o, &err);
	ok(c.allocs == 6 && c.bytes == 3 * (6 * 192 * sizeof(float) + 6 * sizeof(int32_t)),
	   "the caller's allocator gives the 3 x (x, y) batch buffers (%d allocations)", c.allocs);
	loader_start_epoch(l, 0, 0, &err);
	loader_next(l, &b, &err);
	ok(b->x != NULL && b->n == 6, "batches live in them");
	loader_release(l, b);
	loader_destroy(l);
	ok(c.frees == 6, "and its free gets them all back");
	sampler_free(&s);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One epoch of Fashion-MNIST training data at batch 64 with RandomCrop(28, 4), flip and
 * normalize; returns the seconds it took (load excluded), -1 on error. */
static double fmnist_epoch(const struct data_set *ds, int workers, size_t *nb, uint64_t *sum)
{
	struct tf_spec spec = {
	    .crop = 28, .pad = 4, .flip_p = 0.5, .seed = 3, .mean = {0.2860f}, .std = {0.3530f}};
	struct sampler s;
	struct tf t;
	struct loader *l;
	struct loader_batch *b;
	struct loader_opts o = {.batch_size = 64, .workers = workers};
	struct dp_error err;
	double t0;
	int rc;

	*nb = 0;
	*sum = 0;
	if (sampler_init(&s, ds->count, 1, 0, true, 0, false, &err) != 0 ||
	    tf_init(&t, &spec, 1, 28, 28, &err) != 0 ||
	    loader_create(&l, ds, &s, &t, &o, &err) != 0) {
		diag("%s", err.text);
		return -1;
	}
	t0 = now();
	loader_start_epoch(l, 0, 0, &err);
	while ((rc = loader_next(l, &b, &err)) == 1) {
		/* a cheap fingerprint of what arrived, so runs can be compared */
		for (int i = 0; i < b->n; i++)
			*sum =
			    *sum * 31 + (uint64_t)b->y[i] + (uint64_t)(b->x[i * 784 + 400] * 1000);
		(*nb)++;
		loader_release(l, b);
	}
	t0 = now() - t0;
	loader_destroy(l);
	sampler_free(&s);
	return rc == 0 ? t0 : -1;
}

static void test_fmnist(int bench)
{
	struct data_set ds;
	struct dp_error err;
	double t0 = now(), load;
	size_t nb0, nb2;
	uint64_t s0, s2;

	if (access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) != 0) {
		skip(2,
		     "Fashion-MNIST not installed at " FMNIST " (Debian: dataset-fashion-mnist)");
		return;
	}
	if (data_load_idx(&ds, FMNIST "/train-images-idx3-ubyte.gz",
			  FMNIST "/train-labels-idx1-ubyte.gz", &err) != 0)
		bail_out("%s", err.text);
	load = now() - t0;
	double e0 = fmnist_epoch(&ds, 0, &nb0, &s0), e2 = fmnist_epoch(&ds, 2, &nb2, &s2);
	ok(e0 >= 0 && nb0 == 938, "Fashion-MNIST: one epoch at batch 64 is 938 batches");
	ok(e2 >= 0 && nb2 == nb0 && s2 == s0, "... the same with 2 workers");
	note("Fashion-MNIST train: load %.3f s; epoch (crop+flip+normalize, batch 64): %.3f s "
	     "with 0 workers, %.3f s with 2",
	     load, e0, e2);
	if (bench) {
		for (int w = 1; w <= 4; w++) {
			double e = fmnist_epoch(&ds, w, &nb2, &s2);
			printf("# workers %d: epoch %.3f s (%.0f images/s)\n", w, e, 60000 / e);
		}
	}
	data_free(&ds);
}

/* --bench: ImageNet-size synthetic images (3x224x224, flip + normalize, batch 256). */
static void bench_synthetic(void)
{
	struct tf_spec spec = {
	    .flip_p = 0.5, .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f}};
	struct data_set ds;
	struct sampler s;
	struct tf t;
	struct dp_error err;

	if (data_synthetic(&ds, 256 * 20, 3, 224, 224, 1000, 1, &err) != 0 ||
	    sampler_init(&s, ds.count, 1, 0, true, 0, false, &err) != 0 ||
	    tf_init(&t, &spec, 3, 224, 224, &err) != 0)
		bail_out("%s", err.text);
	for (int w = 0; w <= 8; w = w ? w * 2 : 1) {
		struct loader_opts o = {.batch_size = 256, .workers = w};
		struct loader *l;
		struct loader_batch *b;
		double t0;

		if (loader_create(&l, &ds, &s, &t, &o, &err) != 0)
			bail_out("%s", err.text);
		t0 = now();
		loader_start_epoch(l, 0, 0, &err);
		while (loader_next(l, &b, &err) == 1)
			loader_release(l, b);
		t0 = now() - t0;
		printf("# synthetic 3x224x224, batch 256, workers %d: %.0f images/s\n", w,
		       (double)ds.count / t0);
		loader_destroy(l);
	}
	sampler_free(&s);
	data_free(&ds);
}

/* An encoded set beside the real ones (t0530 trains on a real folder): sample i is a 4x4 PNG
 * of one grey level, 10 + i, label i % 3; the samples in `bad` are not images. */
struct fake {
	uint8_t *png[64];
	size_t len[64];
	int bad[64];
};

static int fake_read(const struct data_set *ds, size_t i, struct data_bytes *b, int *label,
		     struct dp_error *err)
{
	const struct fake *f = ds->priv;

	if (f->bad[i]) {
		static const uint8_t junk[] = "not an image at all";
		if (b->cap < sizeof(junk) && !(b->p = realloc(b->p, b->cap = sizeof(junk))))
			return errprintf(err, "out of memory");
		memcpy(b->p, junk, sizeof(junk));
		b->len = sizeof(junk);
	} else {
		if (b->cap < f->len[i] && !(b->p = realloc(b->p, b->cap = f->len[i])))
			return errprintf(err, "out of memory");
		memcpy(b->p, f->png[i], f->len[i]);
		b->len = f->len[i];
	}
	*label = (int)(i % 3);
	return 0;
}

static void fake_describe(const struct data_set *ds, size_t i, char *buf, size_t n)
{
	(void)ds;
	snprintf(buf, n, "fake/%02zu.png", i);
}

static const struct data_ops fake_ops = {.read = fake_read, .describe = fake_describe};

static void fake_set(struct data_set *ds, struct fake *f, int n)
{
	memset(ds, 0, sizeof(*ds));
	ds->ops = &fake_ops;
	ds->kind = "fake";
	snprintf(ds->name, sizeof(ds->name), "fake");
	ds->count = (size_t)n;
	ds->channels = 3;
	ds->num_classes = 3;
	ds->encoded = true;
	ds->priv = f;
	for (int i = 0; i < n; i++) {
		uint8_t px[4 * 4];
		png_image im = {.version = PNG_IMAGE_VERSION,
				.width = 4,
				.height = 4,
				.format = PNG_FORMAT_GRAY};
		png_alloc_size_t len = 0;

		memset(px, 10 + i, sizeof(px));
		if (!png_image_write_to_memory(&im, NULL, &len, 0, px, 0, NULL) ||
		    !(f->png[i] = malloc(len)) ||
		    !png_image_write_to_memory(&im, f->png[i], &len, 0, px, 0, NULL))
			bail_out("png: %s", im.message);
		f->len[i] = len;
	}
}

/* Two epochs in order (no shuffle), batch 4: the grey level of each output sample. */
static int encoded_epoch(const struct data_set *ds, int workers, long max_bad, FILE *warn,
			 int *levels, int *labels, struct dp_error *err)
{
	struct imtf_spec spec = {.mode = IMTF_EVAL, .channels = 3, .size = 4, .resize = 4};
	struct imtf t;
	struct sampler s;
	struct loader *l;
	struct loader_batch *b;
	struct loader_opts o = {.batch_size = 4,
				.workers = workers,
				.imtf = &t,
				.max_bad = max_bad,
				.warn = warn,
				.what = "data.train"};
	int k = 0, rc;

	if (imtf_init(&t, &spec, err) != 0 ||
	    sampler_init(&s, ds->count, 1, 0, false, 0, false, err) != 0)
		bail_out("setup: %s", err->text);
	if (loader_create(&l, ds, &s, NULL, &o, err) != 0)
		bail_out("loader_create: %s", err->text);
	for (int e = 0; e < 2; e++) {
		if (loader_start_epoch(l, e, 0, err) != 0)
			bail_out("start: %s", err->text);
		k = 0;
		while ((rc = loader_next(l, &b, err)) == 1) {
			for (int i = 0; i < b->n; i++, k++) {
				levels[k] = (int)(b->x[(size_t)i * 48] * 255.0f + 0.5f);
				labels[k] = b->y[i];
			}
			loader_release(l, b);
		}
		if (rc != 0)
			break;
	}
	loader_destroy(l);
	sampler_free(&s);
	return rc;
}

static void test_encoded(void)
{
	struct fake f = {0};
	struct data_set ds;
	struct dp_error err;
	int lv0[16], lb0[16], lv3[16], lb3[16], ok_levels = 1;
	char *text = NULL;
	size_t tlen = 0;
	FILE *w;

	fake_set(&ds, &f, 16);
	f.bad[5] = f.bad[6] = f.bad[15] = 1;
	w = open_memstream(&text, &tlen);
	ok(encoded_epoch(&ds, 0, 3, w, lv0, lb0, &err) == 0, "an encoded set with 3 bad samples, "
							     "max_bad 3: two epochs complete");
	fclose(w);
	w = fopen("/dev/null", "w");
	ok(encoded_epoch(&ds, 3, 3, w, lv3, lb3, &err) == 0, "and with 3 workers");
	fclose(w);
	for (int i = 0; i < 16; i++) {
		int want = i == 5 || i == 6 ? 7 : i == 15 ? 0 : i; /* the next good one, wrapping */
		ok_levels &= lv0[i] == 10 + want && lb0[i] == want % 3;
	}
	ok(ok_levels, "each bad sample is replaced by the next good one (5, 6 -> 7; 15 -> 0), its "
		      "label with it");
	ok(memcmp(lv0, lv3, sizeof(lv0)) == 0 && memcmp(lb0, lb3, sizeof(lb0)) == 0,
	   "the same samples with 0 and 3 workers");
	is_int((long long)(strstr(text, "fake/05.png") != NULL) +
		   (strstr(text, "fake/06.png") != NULL) + (strstr(text, "fake/15.png") != NULL),
	       3, "a warning names each bad sample");
	like(text, "dptrain: warning: data.train: fake/05.png: neither a JPEG nor a PNG",
	     "with the reason");
	ok(strstr(strstr(text, "fake/05.png") + 1, "fake/05.png") == NULL,
	   "once, although both epochs met it");
	free(text);

	/* uint8 batches: the same images before normalisation */
	{
		struct imtf_spec spec = {.mode = IMTF_TRAIN,
					 .channels = 3,
					 .size = 4,
					 .scale = {0.5, 1},
					 .ratio = {0.75, 4.0 / 3},
					 .flip_p = 0.5};
		struct imtf t;
		struct sampler sf, su;
		struct loader *lf, *lu;
		struct loader_batch *bf, *bu;
		struct loader_opts of = {.batch_size = 4,
					 .workers = 2,
					 .imtf = &t,
					 .max_bad = 9,
					 .warn = NULL},
				   ou = of;
		int same = 1, batches = 0;

		f.bad[5] = f.bad[6] = f.bad[15] = 0;
		ou.u8 = true;
		if (imtf_init(&t, &spec, &err) != 0 ||
		    sampler_init(&sf, 16, 1, 0, true, 3, false, &err) != 0 ||
		    sampler_init(&su, 16, 1, 0, true, 3, false, &err) != 0 ||
		    loader_create(&lf, &ds, &sf, NULL, &of, &err) != 0 ||
		    loader_create(&lu, &ds, &su, NULL, &ou, &err) != 0 ||
		    loader_start_epoch(lf, 1, 0, &err) != 0 ||
		    loader_start_epoch(lu, 1, 0, &err) != 0)
			bail_out("u8 setup: %s", err.text);
		while (loader_next(lf, &bf, &err) == 1 && loader_next(lu, &bu, &err) == 1) {
			batches++;
			same &= bu->x == NULL && bf->u8 == NULL && bf->n == bu->n;
			for (int i = 0; i < bf->n * 16; i++)
				for (int c = 0; c < 3; c++)
					same &= bf->x[(size_t)(i / 16 * 3 + c) * 16 + i % 16] ==
						t.lut[c][bu->u8[(size_t)i * 3 + c]];
			same &= memcmp(bf->y, bu->y, (size_t)bf->n * sizeof(int32_t)) == 0;
			loader_release(lf, bf);
			loader_release(lu, bu);
		}
		ok(same && batches == 4,
		   "uint8 NHWC batches are the float batches before normalisation (%d batches)",
		   batches);
		loader_destroy(lf), loader_destroy(lu);
		sampler_free(&sf), sampler_free(&su);
		f.bad[5] = f.bad[6] = f.bad[15] = 1;
	}

	w = fopen("/dev/null", "w");
	ok(encoded_epoch(&ds, 2, 2, w, lv0, lb0, &err) == -1, "3 bad samples, max_bad 2: refused");
	fclose(w);
	like(err.text,
	     "data.train: 3 images could not be read or decoded, more than data.max_bad 2 "
	     "(the last: fake/15.png: neither a JPEG nor a PNG",
	     "naming the limit and the last file");
	for (int i = 0; i < 16; i++)
		free(f.png[i]);
}

int main(int argc, char **argv)
{
	struct data_set ds;
	struct dp_error err;

	if (data_synthetic(&ds, 103, 3, 8, 8, 10, 9, &err) != 0)
		bail_out("%s", err.text);
	test_workers(&ds);
	test_resume(&ds);
	test_ranks_vs_one(&ds);
	test_shutdown(&ds);
	test_errors(&ds);
	test_allocator(&ds);
	test_encoded();
	test_fmnist(argc > 1 && strcmp(argv[1], "--bench") == 0);
	if (argc > 1 && strcmp(argv[1], "--bench") == 0)
		bench_synthetic();
	data_free(&ds);
	return done_testing();
}
