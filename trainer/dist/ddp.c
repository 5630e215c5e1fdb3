/* ddp.c — gradient buckets, the communication thread that reduces them while backward runs,
 * and the parameter/buffer broadcasts of data-parallel training. The main thread only marks
 * parameters final (from the nn grad hook) and waits at the end of backward.
 *
 * On a GPU the hook runs when backward's kernels are issued, not done: a bucket handed over
 * carries a marker (be->ops->mark) recorded after them. NCCL's stream waits for it on the GPU
 * (comm after()), so the reduction is queued at once and starts when the gradients are
 * written; an engine without after() has the communication thread wait for it.
 *
 * Where the comm has memory it reduces in place (comm shared_alloc: the CPU engine's ranks on
 * a node of several), the model's gradients move there for as long as this DDP lives, so each
 * bucket is summed where the ranks wrote it, without a copy in or out; they move back at
 * ddp_destroy, before the comm goes. */
#define _GNU_SOURCE
#include "trainer/dist/ddp.h"
#include "common/error.h"
#include "common/clock.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct ddp {
	struct nn_model *m;
	struct comm *c;
	float *own_grads; /* the model's own gradient buffer while its gradients are the comm's */
	struct ddp_opts o;
	int nparams;
	int *order;	/* parameter indices sorted by offset (the order backward finishes them) */
	int *bucket_of; /* per position in order: its bucket */
	int nbuckets;
	struct ddp_bucket *b;

	pthread_t thread;
	int have_thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* under mu */
	int sync;      /* this backward reduces */
	int ready;     /* buckets 0..ready-1 may be reduced (handed over in index order) */
	int *is_ready; /* per bucket: all its gradients are final */
	void **ev;     /* per bucket: marker after the work writing it (device backends) */
	int next;      /* buckets reduced so far this step (the thread's next one) */
	int stop;
	int failed;
	struct dp_error err; /* why failed */
	double wait_s;
	float vote;
};

static void *comm_thread(void *arg)
{
	struct ddp *d = arg;
	struct dp_error err;
	pthread_mutex_lock(&d->mu);
	for (;;) {
		while (!d->stop && !d->failed && d->next >= d->ready)
			pthread_cond_wait(&d->cv, &d->mu);
		if (d->stop || d->failed)
			break;
		int i = d->next;
		struct ddp_bucket *b = &d->b[i];
		struct backend *be = d->m->be;
		pthread_mutex_unlock(&d->mu);
		int rv = 0;
		/* NCCL: its stream waits for the bucket's marker on the GPU; else this thread */
		if (d->c->ops->after && d->ev[i])
			rv = d->c->ops->after(d->c, d->ev[i], &err);
		else if (be->ops->mark_wait && be->ops->mark_wait(be, d->ev[i]) < 0) {
			rv = errprintf(&err, "waiting for its gradients: %s", be->err.text);
		}
		if (rv == 0)
			rv =
			    d->c->ops->allreduce(d->c, d->m->grads + b->lo, b->hi - b->lo, COMM_F32,
						 d->o.gradients_mean ? COMM_AVG : COMM_SUM, &err);
		pthread_mutex_lock(&d->mu);
		if (rv < 0) {
			d->failed = 1;
			errprintf(&d->err, "gradient bucket %d of %d: %s", i + 1, d->nbuckets,
				  err.text);
			pthread_cond_broadcast(&d->cv);
			break;
		}
		d->next = i + 1;
		pthread_cond_broadcast(&d->cv);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

/* Hand buckets over in index order: bucket i goes once it and all before it are final. */
static void advance_ready(struct ddp *d)
{
	int r = d->ready;
	while (r < d->nbuckets && d->is_ready[r])
		r++;
	if (r != d->ready) {
		d->ready = r;
		pthread_cond_broadcast(&d->cv);
	}
}

/* Bucket i's gradients are final (under mu): on a device backend, mark where the work writing
 * them ends. A marker that cannot be recorded fails the step at ddp_finish. */
static void bucket_final(struct ddp *d, int i)
{
	struct backend *be = d->m->be;
	d->is_ready[i] = 1;
	if (be->ops->mark && be->ops->mark(be, &d->ev[i]) < 0 && !d->failed) {
		d->failed = 1;
		errprintf(&d->err, "gradient bucket %d of %d: %s", i + 1, d->nbuckets,
			  be->err.text);
		pthread_cond_broadcast(&d->cv);
	}
}

/* nn grad hook: the parameters in [offset, offset + count) are final. */
static void on_grad(void *ctx, size_t offset, size_t count)
{
	struct ddp *d = ctx;
	if (!d->sync)
		return;
	/* first parameter (in offset order) at or after offset */
	int lo = 0, hi = d->nparams;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (d->m->params[d->order[mid]].offset < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	pthread_mutex_lock(&d->mu);
	for (int i = lo; i < d->nparams && d->m->params[d->order[i]].offset < offset + count; i++) {
		struct ddp_bucket *b = &d->b[d->bucket_of[i]];
		size_t n = d->m->params[d->order[i]].count;
		b->pending = b->pending > n ? b->pending - n : 0;
		if (b->pending == 0 && !d->is_ready[d->bucket_of[i]])
			bucket_final(d, d->bucket_of[i]);
	}
	advance_ready(d);
	pthread_mutex_unlock(&d->mu);
}

static int by_offset(const void *a, const void *b, void *ctx)
{
	const struct nn_model *m = ctx;
	size_t x = m->params[*(const int *)a].offset, y = m->params[*(const int *)b].offset;
	return x < y ? -1 : x > y;
}

static int plan_buckets(struct ddp *d, struct dp_error *err)
{
	const struct nn_model *m = d->m;
	int n = d->nparams;
	d->b = calloc((size_t)n + 1, sizeof(*d->b));
	if (!d->b)
		return errprintf(err, "out of memory");
	for (int i = 0; i < d->o.nfusion_split; i++)
		if (d->o.fusion_split[i] >= n)
			return errprintf(
			    err,
			    "parallel.all_reduce_fusion_config: split index %d, but %s has %d "
			    "parameters (indices 0-%d); use smaller indices",
			    d->o.fusion_split[i], m->name, n, n - 1);
	size_t cap = d->o.first_bucket_bytes ? d->o.first_bucket_bytes : d->o.bucket_bytes;
	int nb = 0, split = 0;
	size_t bytes = 0;
	for (int i = 0; i < n; i++) {
		const struct nn_param *p = &m->params[d->order[i]];
		int cut = 0;
		if (i > 0) {
			if (d->o.nfusion_split > 0) {
				if (split < d->o.nfusion_split && d->o.fusion_split[split] == i) {
					cut = 1;
					split++;
				}
			} else if (bytes + p->count * sizeof(float) > cap) {
				cut = 1;
			}
		}
		if (i == 0 || cut) {
			if (i > 0) {
				d->b[nb - 1].last = i - 1;
				cap = d->o.bucket_bytes;
			}
			d->b[nb].first = i;
			d->b[nb].lo = i == 0 ? 0 : p->offset;
			nb++;
			bytes = 0;
		}
		bytes += p->count * sizeof(float);
		d->bucket_of[i] = nb - 1;
	}
	if (nb == 0) { /* a model without parameters: nothing to reduce */
		d->nbuckets = 0;
		return 0;
	}
	d->b[nb - 1].last = n - 1;
	for (int i = 0; i < nb; i++) /* the last one with the vote past the gradients */
		d->b[i].hi = i + 1 < nb ? d->b[i + 1].lo : m->param_total + 1;
	d->nbuckets = nb;
	return 0;
}

int ddp_create(struct ddp **out, struct nn_model *m, struct comm *c, const struct ddp_opts *o,
	       struct dp_error *err)
{
	struct ddp *d = calloc(1, sizeof(*d));
	int rv = -1;
	*out = NULL;
	if (!d)
		return errprintf(err, "out of memory");
	d->m = m;
	d->c = c;
	d->o = *o;
	if (d->o.bucket_bytes == 0)
		d->o.bucket_bytes = 25u << 20;
	d->nparams = m->nparams;
	d->order = calloc((size_t)m->nparams + 1, sizeof(int));
	d->bucket_of = calloc((size_t)m->nparams + 1, sizeof(int));
	d->is_ready = calloc((size_t)m->nparams + 1, sizeof(int));
	d->ev = calloc((size_t)m->nparams + 1, sizeof(void *));
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	if (!d->order || !d->bucket_of || !d->is_ready || !d->ev) {
		errprintf(err, "out of memory");
		goto out;
	}
	for (int i = 0; i < m->nparams; i++)
		d->order[i] = i;
	qsort_r(d->order, (size_t)m->nparams, sizeof(int), by_offset, m);
	if (plan_buckets(d, err) < 0)
		goto out;
	/* host memory only (a backend with host_alloc has memory of its own, a GPU's) */
	if (c->ops->shared_alloc && !m->be->ops->host_alloc) {
		size_t bytes = (m->param_total + NN_GRAD_SPARE) * sizeof(float);
		void *sh = NULL;
		if (c->ops->shared_alloc(c, bytes, &sh, err) < 0) {
			errprefix(err, "the gradients' shared memory");
			goto out;
		}
		if (sh) {
			memcpy(sh, m->grads, bytes);
			d->own_grads = m->grads;
			m->grads = sh;
			/* the own buffer's whole pages back to the kernel until ddp_destroy copies
			 * the gradients back (they come back zeroed on the first touch) */
			uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE),
				  a = ((uintptr_t)d->own_grads + pg - 1) / pg * pg,
				  e = ((uintptr_t)d->own_grads + bytes) / pg * pg;
			if (e > a)
				madvise((void *)a, e - a, MADV_DONTNEED);
		}
	}
	if (pthread_create(&d->thread, NULL, comm_thread, d) != 0) {
		errprintf(err, "cannot start the communication thread");
		goto out;
	}
	d->have_thread = 1;
	nn_set_grad_hook(m, on_grad, d);
	*out = d;
	rv = 0;
out:
	if (rv < 0)
		ddp_destroy(d);
	return rv;
}

void ddp_destroy(struct ddp *d)
{
	if (!d)
		return;
	if (d->have_thread) {
		pthread_mutex_lock(&d->mu);
		d->stop = 1;
		pthread_cond_broadcast(&d->cv);
		pthread_mutex_unlock(&d->mu);
		pthread_join(d->thread, NULL);
	}
	if (d->m && d->m->hook_ctx == d)
		nn_set_grad_hook(d->m, NULL, NULL);
	if (d->own_grads) {
		memcpy(d->own_grads, d->m->grads,
		       (d->m->param_total + NN_GRAD_SPARE) * sizeof(float));
		d->m->grads = d->own_grads;
	}
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->cv);
	free(d->order);
	free(d->bucket_of);
	free(d->is_ready);
	for (int i = 0; d->ev && i < d->nparams + 1; i++)
		if (d->ev[i] && d->m->be->ops->mark_free)
			d->m->be->ops->mark_free(d->m->be, d->ev[i]);
	free(d->ev);
	free(d->b);
	free(d);
}

/* The buffers, once the backend's work writing them is done. */
static int broadcast_buffers_synced(struct ddp *d, struct dp_error *err)
{
	struct nn_model *m = d->m;
	if (m->state_total == 0)
		return 0;
	if (d->c->ops->broadcast(d->c, m->state, m->state_total * sizeof(float), 0, err) < 0 ||
	    d->c->ops->broadcast(d->c, &m->batches_tracked, sizeof(m->batches_tracked), 0, err) < 0)
		return errprefix(err, "broadcasting BatchNorm statistics from rank 0");
	return 0;
}

int ddp_broadcast_buffers(struct ddp *d, struct dp_error *err)
{
	struct nn_model *m = d->m;
	if (m->state_total == 0)
		return 0;
	/* the collectives run apart from the backend's work (NCCL: on their own stream) */
	if (m->be->ops->sync(m->be) < 0)
		return errprintf(err, "broadcasting BatchNorm statistics: %s", m->be->err.text);
	return broadcast_buffers_synced(d, err);
}

int ddp_broadcast_params(struct ddp *d, struct dp_error *err)
{
	struct nn_model *m = d->m;
	if (m->be->ops->sync(m->be) < 0)
		return errprintf(err, "broadcasting the parameters: %s", m->be->err.text);
	if (d->c->ops->broadcast(d->c, m->weights, m->param_total * sizeof(float), 0, err) < 0)
		return errprefix(err, "broadcasting the parameters from rank 0");
	return broadcast_buffers_synced(d, err);
}

void ddp_set_vote(struct ddp *d, float vote)
{
	d->vote = vote;
}

int ddp_votes(const struct ddp *d, float *votes, struct dp_error *err)
{
	struct backend *be = d->m->be;

	*votes = 0;
	if (be->ops->to_host(be, votes, d->m->grads + d->m->param_total, sizeof(*votes)) < 0)
		return errprintf(err, "ddp: cannot read the ranks' stop votes from %s: %s",
				 be->ops->name, be->err.text);
	return 0;
}

int ddp_begin_backward(struct ddp *d, int sync, struct dp_error *err)
{
	if (sync) {
		struct backend *be = d->m->be;
		if (be->ops->from_host(be, d->m->grads + d->m->param_total, &d->vote,
				       sizeof(d->vote)) < 0)
			return errprintf(err, "ddp: cannot put this rank's stop vote on %s: %s",
					 be->ops->name, be->err.text);
	}
	pthread_mutex_lock(&d->mu);
	d->sync = sync;
	if (sync) {
		for (int i = 0; i < d->nbuckets; i++) {
			struct ddp_bucket *b = &d->b[i];
			b->pending = 0;
			for (int j = b->first; j <= b->last; j++)
				b->pending += d->m->params[d->order[j]].count;
			d->is_ready[i] = 0;
			if (b->pending == 0)
				bucket_final(d, i);
		}
		/* the thread is idle: the last ddp_finish saw it reduce every bucket */
		d->ready = 0;
		d->next = 0;
		advance_ready(d);
	}
	pthread_mutex_unlock(&d->mu);
	return 0;
}

int ddp_finish(struct ddp *d, struct dp_error *err)
{
	double t0 = now_s();
	int rv = 0;
	pthread_mutex_lock(&d->mu);
	if (d->sync) {
		/* Backward is over: every gradient is final, whatever the hooks said. */
		for (int i = 0; i < d->nbuckets; i++)
			if (!d->is_ready[i])
				bucket_final(d, i);
		advance_ready(d);
		while (!d->failed && d->next < d->nbuckets)
			pthread_cond_wait(&d->cv, &d->mu);
		d->sync = 0;
	}
	if (d->failed)
		rv = errprintf(err, "%s", d->err.text);
	pthread_mutex_unlock(&d->mu);
	d->wait_s = now_s() - t0;
	return rv;
}

int ddp_grads_shared(const struct ddp *d)
{
	return d && d->own_grads;
}

int ddp_bucket_count(const struct ddp *d)
{
	return d->nbuckets;
}

const struct ddp_bucket *ddp_bucket(const struct ddp *d, int i)
{
	return i >= 0 && i < d->nbuckets ? &d->b[i] : NULL;
}

double ddp_last_wait(const struct ddp *d)
{
	return d->wait_s;
}
