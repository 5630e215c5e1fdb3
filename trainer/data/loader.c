/* loader.c — batches from sampler + dataset + transforms, prefetched by worker threads into a
 * ring of buffers: batch b always goes to slot b % prefetch and is produced from nothing but
 * (sampler, b), so the order and content never depend on the workers. Owns its threads
 * (signals blocked: the trainer's main thread takes SIGTERM/SIGUSR1) and buffers. */
#include "trainer/data/loader.h"
#include "common/error.h"
#include "common/warn.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum slot_state {
	SLOT_FREE,    /* may be filled with batch next_fill */
	SLOT_FILLING, /* a worker is producing `batch` */
	SLOT_READY,   /* `batch` is ready for loader_next */
	SLOT_FAILED,  /* producing `batch` failed: err says why */
	SLOT_HELD,    /* handed to the caller, not released yet */
};

struct slot {
	struct loader_batch b;
	enum slot_state state;
	size_t batch;
	struct dp_error err; /* why it is SLOT_FAILED */
};

struct loader {
	const struct data_set *ds;
	struct sampler *s;
	const struct tf *tf;
	struct loader_opts o;
	size_t elems; /* floats per sample */

	int nslots;
	struct slot *slots;
	uint8_t **scratch;	 /* one data_get scratch buffer per worker (one for workers = 0) */
	struct enc_scratch *enc; /* encoded sets: one per worker (one for workers = 0) */
	uint8_t *bad;		 /* encoded sets: a bit per sample, set once warned about */
	long nbad;		 /* samples skipped */
	/* of the skipped ones, the one latest in dataset order and its message: what the error
	 * past max_bad names, the same whichever worker counted which sample first */
	size_t bad_last;
	char bad_last_msg[DATA_NAME_MAX + 64 + sizeof(((struct dp_error *)0)->text)];
	pthread_mutex_t bad_mu; /* guards bad, nbad, bad_last* (fill may run under mu) */
	pthread_t *threads;
	int nthreads; /* started */

	/* Everything below is guarded by mu; cv is broadcast on every change. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	bool active; /* an epoch is running; the sampler is not to be changed */
	bool failed; /* a batch failed: produce nothing more this epoch */
	size_t nbatches, next_fill, next_take;
	int64_t epoch, first_step;
};

struct enc_scratch {
	struct data_bytes bytes;
	struct imtf_scratch im;
};

struct worker_arg {
	struct loader *l;
	int id;
};

static void *xalloc(const struct loader *l, size_t bytes)
{
	return l->o.alloc.alloc ? l->o.alloc.alloc(l->o.alloc.ctx, bytes) : malloc(bytes);
}

static void xfree(const struct loader *l, void *p)
{
	if (!p)
		return;
	if (l->o.alloc.free)
		l->o.alloc.free(l->o.alloc.ctx, p);
	else
		free(p);
}

/* Warn about sample idx once; count it when it is skipped. -1 with err past max_bad. */
static int note_bad(struct loader *l, size_t idx, bool skipped, const char *why,
		    struct dp_error *err)
{
	char name[DATA_NAME_MAX + 64], last[sizeof(l->bad_last_msg)];
	bool first;
	long nbad;

	data_describe(l->ds, idx, name, sizeof(name));
	/* a reader's message may already start with the file's name */
	if (strncmp(why, name, strlen(name)) == 0 && strncmp(why + strlen(name), ": ", 2) == 0)
		why += strlen(name) + 2;
	pthread_mutex_lock(&l->bad_mu);
	first = !(l->bad[idx / 8] & (1u << (idx % 8)));
	l->bad[idx / 8] |= (uint8_t)(1u << (idx % 8));
	if (first && skipped) {
		if (l->nbad == 0 || idx > l->bad_last) {
			l->bad_last = idx;
			snprintf(l->bad_last_msg, sizeof(l->bad_last_msg), "%s: %s", name, why);
		}
		l->nbad++;
	}
	nbad = l->nbad;
	memcpy(last, l->bad_last_msg, sizeof(last));
	if (first)
		dp_warn_to(l->o.warn, "dptrain", NULL, "%s: %s: %s%s",
			   l->o.what ? l->o.what : "data", name, why,
			   skipped ? "; skipped (the next sample takes its place)"
				   : "; decoded what was there");
	pthread_mutex_unlock(&l->bad_mu);
	if (skipped && nbad > l->o.max_bad)
		return errprintf(err,
				 "%s: %ld images could not be read or decoded, more than "
				 "data.max_bad %ld (the last: %s); repair or remove them "
				 "(dptrain-data verify lists them all) or raise data.max_bad",
				 l->o.what ? l->o.what : "data", nbad, l->o.max_bad, last);
	return 0;
}

/* An encoded sample: read, decode and augment (into x, or u8 when the loader hands over
 * bytes); a bad one is replaced by the next good one. */
static int fill_encoded(struct loader *l, size_t idx, struct enc_scratch *es, float *x, uint8_t *u8,
			int *label, struct dp_error *err)
{
	size_t n = l->ds->count;

	for (size_t tries = 0; tries <= n; tries++, idx = (idx + 1) % n) {
		struct dp_error why;
		bool warned = false;

		if (data_read(l->ds, idx, &es->bytes, label, &why) == 0 &&
		    (u8 ? imtf_apply_u8(l->o.imtf, l->epoch, idx, es->bytes.p, es->bytes.len,
					&es->im, u8, &warned, &why)
			: imtf_apply(l->o.imtf, l->epoch, idx, es->bytes.p, es->bytes.len, &es->im,
				     x, &warned, &why)) == 0) {
			if (warned && note_bad(l, idx, false, why.text, err) < 0)
				return -1;
			return 0;
		}
		if (note_bad(l, idx, true, why.text, err) < 0)
			return -1;
	}
	return errprintf(err, "%s: no sample of %s can be read or decoded",
			 l->o.what ? l->o.what : "data", l->ds->name);
}

/* Produce batch `b` into slot `sl`. Reads only what start_epoch froze (sampler, epoch),
 * so it runs without the lock. */
static int fill(struct loader *l, struct slot *sl, size_t b, int wid, struct dp_error *err)
{
	size_t B = (size_t)l->o.batch_size, first = b * B, len = sampler_len(l->s);
	size_t n = len - first < B ? len - first : B;

	for (size_t i = 0; i < n; i++) {
		size_t idx = sampler_index(l->s, first + i);
		const uint8_t *px;
		int label;

		if (l->ds->encoded) {
			if (fill_encoded(
				l, idx, &l->enc[wid], l->o.u8 ? NULL : sl->b.x + i * l->elems,
				l->o.u8 ? sl->b.u8 + i * l->elems : NULL, &label, err) != 0)
				return -1;
		} else {
			if (data_get(l->ds, idx, l->scratch[wid], &px, &label, err) != 0)
				return -1;
			tf_apply(l->tf, l->epoch, idx, px, sl->b.x + i * l->elems);
		}
		sl->b.y[i] = label;
	}
	sl->b.n = (int)n;
	sl->b.epoch = l->epoch;
	sl->b.step = l->first_step + (int64_t)b;
	sl->b.next_offset = sampler_offset_after(l->s, first + n);
	return 0;
}

/* Under mu: may a worker claim the next batch? */
static bool claimable(const struct loader *l)
{
	return l->active && !l->failed && l->next_fill < l->nbatches &&
	       l->slots[l->next_fill % (size_t)l->nslots].state == SLOT_FREE;
}

static void *worker(void *arg)
{
	struct loader *l = ((struct worker_arg *)arg)->l;
	int wid = ((struct worker_arg *)arg)->id;

	free(arg);
	pthread_mutex_lock(&l->mu);
	for (;;) {
		struct slot *sl;
		size_t b;
		int rc;

		while (!l->stop && !claimable(l))
			pthread_cond_wait(&l->cv, &l->mu);
		if (l->stop)
			break;
		b = l->next_fill++;
		sl = &l->slots[b % (size_t)l->nslots];
		sl->state = SLOT_FILLING;
		sl->batch = b;
		pthread_mutex_unlock(&l->mu);
		rc = fill(l, sl, b, wid, &sl->err);
		pthread_mutex_lock(&l->mu);
		sl->state = rc == 0 ? SLOT_READY : SLOT_FAILED;
		if (rc != 0)
			l->failed = true;
		pthread_cond_broadcast(&l->cv);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

static size_t epoch_batches(const struct loader *l, size_t samples)
{
	size_t B = (size_t)l->o.batch_size;

	return l->o.drop_remainder ? samples / B : (samples + B - 1) / B;
}

int loader_create(struct loader **out, const struct data_set *ds, struct sampler *s,
		  const struct tf *tf, const struct loader_opts *opts, struct dp_error *err)
{
	struct loader *l;
	struct sampler whole;
	sigset_t all, old;
	size_t per_epoch, x_bytes, y_bytes, esize;
	int nscratch, rc;

	*out = NULL;
	if (opts->batch_size < 1 || opts->workers < 0 || opts->workers > 256 ||
	    opts->prefetch < 0 || opts->prefetch > 1024) {
		errprintf(err,
			  "loader: batch size %d, workers %d, prefetch %d: need batch size >= 1, "
			  "0..256 workers, 0..1024 prefetch",
			  opts->batch_size, opts->workers, opts->prefetch);
		return -1;
	}
	if (ds->encoded ? !opts->imtf || opts->imtf->spec.channels > 3
			: !tf || tf->channels != ds->channels || tf->in_h != ds->height ||
			      tf->in_w != ds->width) {
		if (ds->encoded || !tf) {
			errprintf(err, "loader: %s needs %s", ds->name,
				  ds->encoded ? "an image transform (imtf)"
					      : "a transform for decoded images (tf)");
			return -1;
		}
		errprintf(err,
			  "loader: the transform is set up for %dx%dx%d images but %s has %dx%dx%d",
			  tf->channels, tf->in_h, tf->in_w, ds->name, ds->channels, ds->height,
			  ds->width);
		return -1;
	}
	if (opts->u8 && !ds->encoded) {
		errprintf(err, "loader: %s is decoded already; uint8 batches are for encoded sets",
			  ds->name);
		return -1;
	}
	if (s->n != ds->count) {
		errprintf(err, "loader: the sampler covers %zu samples but %s has %zu", s->n,
			  ds->name, ds->count);
		return -1;
	}
	whole = *s;
	whole.start = 0;
	per_epoch = sampler_len(&whole);
	if (opts->drop_remainder && (size_t)opts->batch_size > per_epoch) {
		errprintf(
		    err,
		    "data.batch_size %d is larger than the %zu samples rank %d gets per epoch "
		    "with drop_remainder; lower the batch size or set drop_remainder false",
		    opts->batch_size, per_epoch, s->rank);
		return -1;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		errprintf(err, "loader: out of memory");
		return -1;
	}
	l->ds = ds;
	l->s = s;
	l->tf = tf;
	l->o = *opts;
	l->elems = ds->encoded ? imtf_out_elems(opts->imtf) : tf_out_elems(tf);
	l->nslots = opts->prefetch ? opts->prefetch : opts->workers < 2 ? 2 : opts->workers + 1;
	pthread_mutex_init(&l->mu, NULL);
	pthread_mutex_init(&l->bad_mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	esize = opts->u8 ? 1 : sizeof(float);
	x_bytes = (size_t)opts->batch_size * l->elems * esize;
	y_bytes = (size_t)opts->batch_size * sizeof(int32_t);
	if (x_bytes / esize / l->elems != (size_t)opts->batch_size) {
		errprintf(err, "loader: a batch of %d is too large", opts->batch_size);
		goto fail;
	}
	nscratch = opts->workers ? opts->workers : 1;
	l->slots = calloc((size_t)l->nslots, sizeof(*l->slots));
	l->scratch = calloc((size_t)nscratch, sizeof(*l->scratch));
	l->threads = calloc((size_t)nscratch, sizeof(*l->threads));
	if (!l->slots || !l->scratch || !l->threads)
		goto oom;
	if (ds->encoded) {
		l->enc = calloc((size_t)nscratch, sizeof(*l->enc));
		l->bad = calloc(ds->count / 8 + 1, 1);
		if (!l->enc || !l->bad)
			goto oom;
	}
	for (int i = 0; i < l->nslots; i++) {
		if (opts->u8)
			l->slots[i].b.u8 = xalloc(l, x_bytes);
		else
			l->slots[i].b.x = xalloc(l, x_bytes);
		l->slots[i].b.y = xalloc(l, y_bytes);
		if ((!l->slots[i].b.x && !l->slots[i].b.u8) || !l->slots[i].b.y)
			goto oom;
	}
	for (int i = 0; i < nscratch; i++)
		if (!(l->scratch[i] = malloc(ds->image_bytes ? ds->image_bytes : 1)))
			goto oom;

	/* Workers inherit a full signal mask: signals go to the threads that handle them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (int i = 0; i < opts->workers; i++) {
		struct worker_arg *a = malloc(sizeof(*a));

		if (!a) {
			rc = -1;
		} else {
			a->l = l;
			a->id = i;
			rc = pthread_create(&l->threads[i], NULL, worker, a);
			if (rc != 0)
				free(a);
		}
		if (rc != 0) {
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			errprintf(
			    err, "loader: cannot start prefetch worker %d of %d; use fewer workers",
			    i, opts->workers);
			goto fail;
		}
		l->nthreads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	*out = l;
	return 0;
oom:
	errprintf(err, "loader: out of memory for %d batch buffers of %zu bytes", l->nslots,
		  x_bytes + y_bytes);
fail:
	loader_destroy(l);
	return -1;
}

int loader_start_epoch(struct loader *l, int64_t epoch, size_t start, struct dp_error *err)
{
	int rv = 0;

	pthread_mutex_lock(&l->mu);
	for (int i = 0; i < l->nslots; i++) {
		if (l->slots[i].state == SLOT_HELD) { /* refused: the epoch goes on */
			errprintf(
			    err,
			    "loader: batch %zu of epoch %lld is still held; release every batch "
			    "before starting an epoch",
			    l->slots[i].batch, (long long)l->epoch);
			rv = -1;
			goto out;
		}
	}
	/* No new claims; let batches being produced finish, then drop everything. */
	l->active = false;
	for (int i = 0; i < l->nslots; i++)
		while (l->slots[i].state == SLOT_FILLING)
			pthread_cond_wait(&l->cv, &l->mu);
	for (int i = 0; i < l->nslots; i++)
		l->slots[i].state = SLOT_FREE;
	sampler_set_epoch(l->s, epoch);
	sampler_set_start(l->s, start);
	l->epoch = epoch;
	l->first_step = (int64_t)(start / ((size_t)l->o.batch_size * (size_t)l->s->num_replicas));
	l->nbatches = epoch_batches(l, sampler_len(l->s));
	l->next_fill = l->next_take = 0;
	l->failed = false;
	l->active = true;
	pthread_cond_broadcast(&l->cv);
out:
	pthread_mutex_unlock(&l->mu);
	return rv;
}

size_t loader_batches(const struct loader *l)
{
	return l->nbatches;
}

int loader_next(struct loader *l, struct loader_batch **b, struct dp_error *err)
{
	struct slot *sl;
	int rv = -1;

	*b = NULL;
	pthread_mutex_lock(&l->mu);
	if (!l->active) {
		errprintf(err, "loader: no epoch started (loader_start_epoch)");
		goto out;
	}
	if (l->next_take >= l->nbatches) {
		rv = 0;
		goto out;
	}
	sl = &l->slots[l->next_take % (size_t)l->nslots];
	if (sl->state == SLOT_HELD) {
		errprintf(err,
			  "loader: all %d prefetch buffers are held; release a batch before asking "
			  "for the next",
			  l->nslots);
		goto out;
	}
	if (l->nthreads == 0) {
		/* No workers: produce it here (the lock keeps loader_release coherent). */
		sl->state = SLOT_FILLING;
		sl->batch = l->next_take;
		sl->state = fill(l, sl, l->next_take, 0, &sl->err) == 0 ? SLOT_READY : SLOT_FAILED;
	}
	while (
	    !((sl->state == SLOT_READY || sl->state == SLOT_FAILED) && sl->batch == l->next_take))
		pthread_cond_wait(&l->cv, &l->mu);
	if (sl->state == SLOT_FAILED) {
		l->failed = true;
		errprintf(err, "%s", sl->err.text);
		goto out; /* stays FAILED: every later call reports it too */
	}
	sl->state = SLOT_HELD;
	l->next_take++;
	*b = &sl->b;
	rv = 1;
out:
	pthread_mutex_unlock(&l->mu);
	return rv;
}

void loader_release(struct loader *l, struct loader_batch *b)
{
	pthread_mutex_lock(&l->mu);
	for (int i = 0; i < l->nslots; i++) {
		if (&l->slots[i].b == b && l->slots[i].state == SLOT_HELD) {
			l->slots[i].state = SLOT_FREE;
			pthread_cond_broadcast(&l->cv);
		}
	}
	pthread_mutex_unlock(&l->mu);
}

void loader_destroy(struct loader *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	l->stop = true;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	for (int i = 0; i < l->nthreads; i++)
		pthread_join(l->threads[i], NULL);
	if (l->slots) {
		for (int i = 0; i < l->nslots; i++) {
			xfree(l, l->slots[i].b.x);
			xfree(l, l->slots[i].b.u8);
			xfree(l, l->slots[i].b.y);
		}
	}
	if (l->scratch)
		for (int i = 0; i < (l->o.workers ? l->o.workers : 1); i++)
			free(l->scratch[i]);
	if (l->enc)
		for (int i = 0; i < (l->o.workers ? l->o.workers : 1); i++) {
			free(l->enc[i].bytes.p);
			imtf_scratch_free(&l->enc[i].im);
		}
	free(l->enc);
	free(l->bad);
	free(l->scratch);
	free(l->threads);
	free(l->slots);
	pthread_mutex_destroy(&l->mu);
	pthread_mutex_destroy(&l->bad_mu);
	pthread_cond_destroy(&l->cv);
	free(l);
}
