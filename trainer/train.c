/* train.c — the training loop: config -> backend, model, data, optimizer, schedule; then
 * epochs of (micro-)steps with MindSpore-style loss lines, evaluation, a metrics JSONL file
 * and the final weights. With several ranks, ddp reduces the gradients during backward, the
 * evaluation is sharded and reduced, and rank 0 reports the global figures. */
#define _GNU_SOURCE
#include "trainer/train.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "trainer/backend/backend.h"
#include "trainer/dist/comm.h"
#include "trainer/data/data.h"
#include "trainer/dist/ddp.h"
#include "common/failf.h"
#include "trainer/data/loader.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/nn/nn.h"
#include "trainer/optim/optim.h"
#include "ranktable/ranktable.h"
#include "trainer/optim/optim_gpu.h"
#include "trainer/data/sampler.h"
#include "trainer/train_ckpt.h"
#include "trainer/data/transform.h"

/* One split of the data (train or eval): set, transforms, sampler, loader. */
struct split {
	struct data_set ds;
	struct tf tf;
	struct sampler s;
	struct loader *l;
	int have_ds, have_s;
};

static void split_free(struct split *sp)
{
	loader_destroy(sp->l);
	if (sp->have_s)
		sampler_free(&sp->s);
	if (sp->have_ds)
		data_free(&sp->ds);
	memset(sp, 0, sizeof(*sp));
}

static int load_set(struct data_set *ds, const struct cfg *c, const struct cfg_data_source *src,
		    const char *what, char *err, size_t errlen)
{
	char derr[4096];
	int rv = -1;
	switch (c->data.format) {
	case CFG_DATA_IDX:
		rv = data_load_idx(ds, src->images, src->labels, derr);
		break;
	case CFG_DATA_CIFAR10:
		rv = data_load_cifar10(ds, src->files.n, (const char *const *)src->files.v, derr);
		break;
	case CFG_DATA_SYNTHETIC:
		rv = data_synthetic(ds, (size_t)src->size, c->model.input_shape[0],
				    c->model.input_shape[1], c->model.input_shape[2],
				    c->model.num_classes,
				    (uint64_t)c->data.seed + (strcmp(what, "eval") == 0), derr);
		break;
	}
	if (rv < 0)
		return failf(err, errlen, "data.%s: %s", what, derr);
	if (ds->channels != c->model.input_shape[0] || ds->height != c->model.input_shape[1] ||
	    ds->width != c->model.input_shape[2]) {
		failf(err, errlen,
		      "data.%s: %s holds %dx%dx%d images but model.input_shape is [%d, %d, %d]; "
		      "set model.input_shape to match the data",
		      what, ds->name, ds->channels, ds->height, ds->width, c->model.input_shape[0],
		      c->model.input_shape[1], c->model.input_shape[2]);
		data_free(ds);
		return -1;
	}
	if (ds->num_classes > c->model.num_classes) {
		failf(err, errlen,
		      "data.%s: %s has labels up to %d but model.num_classes is %d; raise "
		      "model.num_classes",
		      what, ds->name, ds->num_classes - 1, c->model.num_classes);
		data_free(ds);
		return -1;
	}
	return 0;
}

/* Batch buffers in page-locked memory where the backend has it: uploads from there run on a
 * copy engine, asynchronously. */
static void *pinned_alloc(void *ctx, size_t bytes)
{
	struct backend *be = ctx;
	return be->ops->host_alloc(be, bytes);
}

static void pinned_free(void *ctx, void *p)
{
	struct backend *be = ctx;
	be->ops->host_free(be, p);
}

static int split_open(struct split *sp, const struct cfg *c, const struct train_env *env,
		      struct backend *be, int train, char *err, size_t errlen)
{
	const char *what = train ? "train" : "eval";
	char e2[4096]; /* larger than every module's error size */
	if (load_set(&sp->ds, c, train ? &c->data.train : &c->data.eval, what, err, errlen) < 0)
		return -1;
	sp->have_ds = 1;
	struct tf_spec ts = {.seed = (uint64_t)c->data.seed};
	const struct cfg_transforms *t = &c->data.transforms;
	if (train && t->random_crop.enabled) {
		ts.crop = t->random_crop.size ? t->random_crop.size : c->model.input_shape[1];
		ts.pad = t->random_crop.padding;
	}
	if (train && t->horizontal_flip)
		ts.flip_p = 0.5;
	if (t->normalize.enabled)
		for (int i = 0; i < t->normalize.mean.n && i < TF_MAX_CHANNELS; i++) {
			ts.mean[i] = (float)t->normalize.mean.v[i];
			ts.std[i] = (float)t->normalize.std.v[i];
		}
	if (tf_init(&sp->tf, &ts, sp->ds.channels, sp->ds.height, sp->ds.width, e2) < 0)
		return failf(err, errlen, "data.transforms: %s", e2);
	int rv =
	    train ? sampler_init(&sp->s, sp->ds.count, env->world_size, env->rank, c->data.shuffle,
				 (uint64_t)c->data.seed, c->data.drop_remainder, e2)
		  : sampler_init_eval(&sp->s, sp->ds.count, env->world_size, env->rank, e2);
	if (rv < 0)
		return failf(err, errlen, "data.%s: %s", what, e2);
	sp->have_s = 1;
	struct loader_opts lo = {
	    .batch_size = train ? c->data.batch_size : c->data.eval_batch_size,
	    .drop_remainder = train ? c->data.drop_remainder : false,
	    .workers = c->data.workers,
	    .prefetch = c->data.prefetch,
	};
	if (be->ops->host_alloc)
		lo.alloc =
		    (struct loader_alloc){.alloc = pinned_alloc, .free = pinned_free, .ctx = be};
	if (loader_create(&sp->l, &sp->ds, &sp->s, &sp->tf, &lo, e2) < 0)
		return failf(err, errlen, "data.%s: %s", what, e2);
	return 0;
}

/* The input's way to the backend. A host backend reads the loader's buffer itself. A device
 * backend gets the batch uploaded from the loader's page-locked buffer into one of two device
 * buffers by a copy engine, while the work of the step before still runs on the GPU; a buffer
 * is reused once the work that read it (forward and backward) is done. */
struct stage {
	struct backend *be;
	float *x[2];
	size_t cap;    /* floats in each */
	void *done[2]; /* the upload into x[i] is over (its source may change) */
	void *used[2]; /* the work reading x[i] is over */
	int next, cur;
};

static int stage_open(struct stage *st, struct backend *be, size_t floats, char *err, size_t errlen)
{
	memset(st, 0, sizeof(*st));
	st->be = be;
	if (!be->ops->upload)
		return 0;
	st->cap = floats;
	for (int i = 0; i < 2; i++)
		if (!(st->x[i] = be->ops->alloc(be, floats * sizeof(float))))
			return failf(err, errlen, "input buffers on the %s backend: %s",
				     be->ops->name, be->err);
	return 0;
}

static void stage_close(struct stage *st)
{
	struct backend *be = st->be;
	if (!be || !be->ops->upload)
		return;
	for (int i = 0; i < 2; i++) {
		be->ops->mark_wait(be, st->used[i]);
		be->ops->mark_wait(be, st->done[i]);
		be->ops->mark_free(be, st->used[i]);
		be->ops->mark_free(be, st->done[i]);
		be->ops->free(be, st->x[i]);
	}
	memset(st, 0, sizeof(*st));
}

/* The batch's images where the backend's ops can read them. */
static int stage_put(struct stage *st, const struct loader_batch *b, size_t per_sample,
		     const float **x, char *err, size_t errlen)
{
	struct backend *be = st->be;
	size_t n = (size_t)b->n * per_sample;
	if (!be->ops->upload) {
		*x = b->x;
		return 0;
	}
	int i = st->next;
	if (n > st->cap)
		return failf(err, errlen, "a batch of %d samples does not fit the input buffers",
			     b->n);
	if (be->ops->mark_wait(be, st->used[i]) < 0 ||
	    be->ops->upload(be, st->x[i], b->x, n * sizeof(float), &st->done[i]) < 0)
		return failf(err, errlen, "uploading a batch: %s", be->err);
	st->cur = i;
	st->next = i ^ 1;
	*x = st->x[i];
	return 0;
}

/* The work reading the current batch is issued: remember where it ends, and wait for the
 * upload to be over before the loader may refill the batch's buffer. */
static int stage_done(struct stage *st, char *err, size_t errlen)
{
	struct backend *be = st->be;
	if (!be->ops->upload)
		return 0;
	if (be->ops->mark(be, &st->used[st->cur]) < 0 ||
	    be->ops->mark_wait(be, st->done[st->cur]) < 0)
		return failf(err, errlen, "after a batch: %s", be->err);
	return 0;
}

/* The optimizer's update where the parameters are: optim.c on host memory, optim_gpu on a
 * GPU. */
struct opt {
	struct optim o;
	struct optim_gpu *g;
};

/* [lo, hi) is the part of the flat buffers this rank updates: all of it, or with
 * parallel.enable_parallel_optimizer its equal contiguous share (ZeRO-1). */
static int make_optimizer(struct optim *o, const struct cfg *c, const struct nn_model *m, size_t lo,
			  size_t hi, char *err, size_t errlen)
{
	struct optim_params p;
	enum optim_kind kind = c->optimizer.name == CFG_OPT_ADAMW  ? OPTIM_ADAMW
			       : c->optimizer.name == CFG_OPT_LAMB ? OPTIM_LAMB
								   : OPTIM_SGD;
	optim_params_default(&p, kind);
	p.weight_decay = c->optimizer.weight_decay;
	p.momentum = c->optimizer.momentum;
	p.nesterov = c->optimizer.nesterov;
	p.dampening = 0.0;
	p.beta1 = c->optimizer.betas[0];
	p.beta2 = c->optimizer.betas[1];
	p.eps = c->optimizer.eps;
	struct optim_segment *segs = calloc((size_t)m->nparams, sizeof(*segs));
	if (!segs)
		return failf(err, errlen, "out of memory");
	for (int i = 0; i < m->nparams; i++) {
		segs[i].name = m->params[i].name;
		segs[i].offset = m->params[i].offset;
		segs[i].count = m->params[i].count;
		segs[i].decay = p.weight_decay != 0.0 &&
				!(c->optimizer.no_decay_bn_bias && m->params[i].is_bn_or_bias);
	}
	int rv =
	    lo == 0 && hi == m->param_total
		? optim_init(o, &p, segs, m->nparams, m->param_total, err, errlen)
		: optim_init_shard(o, &p, segs, m->nparams, m->param_total, lo, hi, err, errlen);
	free(segs);
	return rv;
}

static int make_schedule(struct lr_schedule *s, const struct cfg *c, long steps_per_epoch,
			 long total_steps, char *err, size_t errlen)
{
	const struct cfg_lr_schedule *l = &c->lr_schedule;
	struct lr_schedule_params p = {.base_lr = c->optimizer.lr,
				       .gamma = l->gamma,
				       .min_lr = l->min_lr,
				       .total_steps = total_steps};
	static const enum lr_schedule_kind kinds[] = {[CFG_LR_CONSTANT] = LR_SCHEDULE_CONSTANT,
						      [CFG_LR_STEP] = LR_SCHEDULE_STEP,
						      [CFG_LR_MULTISTEP] = LR_SCHEDULE_MULTISTEP,
						      [CFG_LR_COSINE] = LR_SCHEDULE_COSINE};
	p.kind = kinds[l->name];
	/* step_size and milestones count epochs or steps (lr_schedule.unit) */
	p.steps_per_epoch = l->unit == CFG_LR_UNIT_STEP ? 1 : steps_per_epoch;
	p.warmup_steps = l->warmup_steps + (long)l->warmup_epochs * steps_per_epoch;
	p.step_size = (long)l->step_size;
	if (l->milestones.n > LR_SCHEDULE_MAX_MILESTONES)
		return failf(err, errlen, "lr_schedule.milestones: at most %d",
			     LR_SCHEDULE_MAX_MILESTONES);
	for (int i = 0; i < l->milestones.n; i++)
		p.milestones[i] = l->milestones.v[i];
	p.nmilestones = l->milestones.n;
	if (p.total_steps < 1)
		p.total_steps = 1;
	if (p.warmup_steps >= p.total_steps && p.kind == LR_SCHEDULE_COSINE)
		p.warmup_steps = p.total_steps - 1;
	if (lr_schedule_init(s, &p, err, errlen) < 0)
		return -1;
	return 0;
}

/* The position to checkpoint after `done` steps of this epoch's iteration (started at the
 * sampler's start), each of per_step samples per rank; at the epoch's end, the next one's
 * beginning. */
static struct train_pos position(const struct sampler *s, long step, int epoch, long done,
				 size_t per_step, int epoch_done)
{
	if (epoch_done)
		return (struct train_pos){.step = step, .epoch = epoch + 1};
	return (struct train_pos){.step = step,
				  .epoch = epoch,
				  .offset = sampler_offset_after(s, (size_t)done * per_step)};
}

/* One optimizer step with the state sharded over the ranks (optim.h's protocol): every rank
 * has the whole reduced gradient (DDP), updates its shard of the parameters, and the shards
 * are then sent to everyone. Exact for SGD and AdamW (element-wise); LAMB's per-tensor norms
 * are summed over the shards. */
static int zero_step(struct opt *op, struct nn_model *m, struct comm *comm, double lr, char *err,
		     size_t errlen)
{
	char e2[2048];
	struct optim *o = &op->o;
	double norm = 0, *sums = NULL;
	int ns = optim_nsums(o), rv = -1;
	if (optim_needs_grad_norm(o)) {
		double gsq;
		if (!op->g)
			gsq = optim_grad_sumsq(o, m->grads);
		else if (optim_gpu_grad_sumsq(op->g, o, m->grads, &gsq, e2, sizeof(e2)) < 0)
			goto fail;
		if (comm->ops->allreduce(comm, &gsq, 1, COMM_F64, COMM_SUM, e2, sizeof(e2)) < 0)
			goto fail;
		norm = sqrt(gsq);
	}
	if (!(sums = calloc((size_t)ns + 1, sizeof(*sums))))
		return failf(err, errlen, "out of memory");
	if (!op->g)
		optim_prepare(o, m->weights, m->grads, norm, sums);
	else if (optim_gpu_prepare(op->g, o, m->weights, m->grads, norm, sums, e2, sizeof(e2)) < 0)
		goto fail;
	if (ns > 0 &&
	    comm->ops->allreduce(comm, sums, (size_t)ns, COMM_F64, COMM_SUM, e2, sizeof(e2)) < 0)
		goto fail;
	if (!op->g)
		optim_apply(o, m->weights, m->grads, lr, sums);
	else if (optim_gpu_apply(op->g, o, m->weights, m->grads, lr, sums, e2, sizeof(e2)) < 0)
		goto fail;
	/* the shards go out from the backend's memory once the update is written there */
	if (m->be->ops->sync(m->be) < 0) {
		snprintf(e2, sizeof(e2), "%s", m->be->err);
		goto fail;
	}
	if (comm_gather_shares(comm, m->weights, m->param_total, e2, sizeof(e2)) < 0)
		goto fail;
	rv = 0;
	goto out;
fail:
	failf(err, errlen, "sharded optimizer step: %s", e2);
out:
	free(sums);
	return rv;
}

/* Loss scaling (precision.loss_scale): the loss gradient is multiplied by the scale, so that
 * small gradients survive in half precision, and the gradients are divided by it again
 * before the update (exactly, for a power of two). Dynamic scaling is PyTorch's GradScaler
 * (MindSpore's DynamicLossScaleManager): a step whose gradients overflowed (inf or nan) is
 * skipped and the scale halved; growth_interval good steps in a row double it. Every rank
 * holds the same reduced gradients, so all decide alike without talking. */
struct scaler {
	int on, dynamic;
	double scale;
	long good, interval, skipped;
};

#define SCALE_MIN 0x1p-24 /* overflowing even here: the gradients are not finite at all */
#define SCALE_MAX 1e30	  /* precision.loss_scale's largest */

/* After backward (and the reduction): 1 when the update may go ahead with unscaled gradients,
 * 0 when it is skipped, -1 on an error. */
static int scaler_check(struct scaler *sc, struct nn_model *m, long step, FILE *out, int rank0,
			char *err, size_t errlen)
{
	struct backend *be = m->be;
	double ss = 0;
	if (!sc->on)
		return 1;
	if (sc->dynamic) {
		if (be->ops->sumsq(be, m->grads, m->param_total, &ss) < 0)
			return failf(err, errlen, "loss scaling at step %ld: %s", step, be->err);
		if (!isfinite(ss)) {
			sc->skipped++;
			sc->good = 0;
			if (sc->scale / 2 < SCALE_MIN)
				return failf(
				    err, errlen,
				    "step %ld: the gradients are not finite even at loss "
				    "scale %g (%ld steps skipped): training diverged; lower "
				    "optimizer.lr or check the data",
				    step, sc->scale, sc->skipped);
			if (rank0)
				fprintf(out,
					"dptrain: step %ld: gradients overflowed at loss scale %g; "
					"step skipped, scale now %g\n",
					step, sc->scale, sc->scale / 2);
			sc->scale /= 2;
			return 0;
		}
	}
	if (be->ops->axpby(be, (float)(1.0 / sc->scale), m->grads, 0.0f, m->grads, m->param_total) <
	    0)
		return failf(err, errlen, "loss scaling at step %ld: %s", step, be->err);
	if (sc->dynamic && ++sc->good >= sc->interval) {
		sc->good = 0;
		if (sc->scale * 2 <= SCALE_MAX)
			sc->scale *= 2;
	}
	return 1;
}

/* Tests: DPTRAIN_TEST_OVERFLOW_AT="3,7" makes the (reduced) gradients of those steps (1-based,
 * global) infinite, as an fp16 overflow would; set it for every rank. */
static int overflow_injected(long step)
{
	const char *e = getenv("DPTRAIN_TEST_OVERFLOW_AT");
	for (const char *p = e; p && *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		if (v == step)
			return 1;
		p = *end == ',' ? end + 1 : end;
	}
	return 0;
}

/* A checkpoint of the model and the optimizer, whose state is first fetched from the GPU. */
static int save_checkpoint(struct train_ckpt *ck, struct opt *op, const struct train_pos *at,
			   char *err, size_t errlen)
{
	char e2[2048];
	if (op->g && optim_gpu_state_to_host(op->g, &op->o, e2, sizeof(e2)) < 0)
		return failf(err, errlen, "checkpoint at step %ld: optimizer state: %s", at->step,
			     e2);
	return train_ckpt_save(ck, at, err, errlen);
}

struct metrics {
	FILE *f;
};

static void metrics_line(struct metrics *mt, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void metrics_line(struct metrics *mt, const char *fmt, ...)
{
	if (!mt->f)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(mt->f, fmt, ap);
	va_end(ap);
	fputc('\n', mt->f);
	fflush(mt->f);
}

/* Evaluate on this rank's shard of the eval set: sum of per-sample losses and correct
 * predictions, and the count; with a comm, summed over the ranks' shards. */
static int evaluate(struct nn_model *m, struct split *ev, struct stage *st, struct comm *comm,
		    double *loss_sum, long *correct, long *count, char *err, size_t errlen)
{
	size_t per_sample = (size_t)m->in_c * (size_t)m->in_h * (size_t)m->in_w;
	char e2[4096];
	struct loader_batch *b;
	int rv;
	*loss_sum = 0;
	*correct = 0;
	*count = 0;
	nn_set_training(m, 0);
	if (loader_start_epoch(ev->l, 0, 0, e2) < 0) {
		nn_set_training(m, 1);
		return failf(err, errlen, "data.eval: %s", e2);
	}
	while ((rv = loader_next(ev->l, &b, e2)) == 1) {
		float *logits, loss;
		const float *x;
		int ok;
		if (stage_put(st, b, per_sample, &x, err, errlen) < 0 ||
		    nn_forward(m, x, b->n, &logits, err, errlen) < 0 ||
		    nn_loss(m, b->y, b->n, 0.0f, 1.0f, &loss, &ok, err, errlen) < 0 ||
		    stage_done(st, err, errlen) < 0) {
			loader_release(ev->l, b);
			nn_set_training(m, 1);
			return -1;
		}
		*loss_sum += (double)loss * b->n;
		*correct += ok;
		*count += b->n;
		loader_release(ev->l, b);
	}
	nn_set_training(m, 1);
	if (rv < 0)
		return failf(err, errlen, "data.eval: %s", e2);
	if (comm) { /* every sample was seen by exactly one rank: the sums are the whole set's */
		double sums[3] = {*loss_sum, (double)*correct, (double)*count};
		if (comm->ops->allreduce(comm, sums, 3, COMM_F64, COMM_SUM, e2, sizeof(e2)) < 0)
			return failf(err, errlen, "evaluation: %s", e2);
		*loss_sum = sums[0];
		*correct = (long)sums[1];
		*count = (long)sums[2];
	}
	return 0;
}

int train_run(const struct cfg *c, const struct train_env *env, struct train_result *res, char *err,
	      size_t errlen)
{
	int rv = -1, have_model = 0, have_optim = 0;
	struct ddp *ddp = NULL;
	struct backend *be = NULL;
	struct nn_model m;
	struct split tr = {0}, ev = {0};
	struct stage st = {0};
	struct opt opt = {0};
	struct lr_schedule sched;
	struct metrics mt = {0};
	char e2[4096]; /* larger than every module's error size */
	FILE *out = env->out ? env->out : stdout;
	int rank0 = env->rank == 0;

	memset(res, 0, sizeof(*res));
	res->eval_accuracy = -1;
	res->resumed_at = -1;
	memset(&m, 0, sizeof(m));
	if (env->gpu >= 0) {
		enum cfg_precision_mode pm = c->precision.mode;
		struct be_cuda_opts co = {.tf32 = pm != CFG_PREC_FP32,
					  .deterministic = c->device.deterministic,
					  .act_dtype = pm == CFG_PREC_BF16   ? BE_BF16
						       : pm == CFG_PREC_FP16 ? BE_F16
									     : BE_F32};
		be = be_cuda_create(env->gpu, &co, e2, sizeof(e2));
		if (!be) {
			failf(err, errlen, "%s", e2);
			goto out;
		}
	} else {
		be = be_cpu_create(c->train.threads ? c->train.threads : env->threads, e2,
				   sizeof(e2));
		if (!be) {
			failf(err, errlen, "cpu backend: %s", e2);
			goto out;
		}
		/* half precision is a GPU mode: device.kind auto on a machine without a GPU (with
		 * device.kind cpu the config check has already warned) */
		if (rank0 && c->device.kind != CFG_DEVICE_CPU &&
		    (c->precision.mode == CFG_PREC_BF16 || c->precision.mode == CFG_PREC_FP16))
			fprintf(
			    stderr,
			    "dptrain: warning: precision.mode %s is a GPU mode; the CPU computes "
			    "in fp32 (loss scaling as precision.loss_scale says)\n",
			    c->precision.mode == CFG_PREC_BF16 ? "bf16" : "fp16");
	}

	struct nn_spec spec = {
	    .name = cfg_model_string(c->model.name),
	    .c = c->model.input_shape[0],
	    .h = c->model.input_shape[1],
	    .w = c->model.input_shape[2],
	    .classes = c->model.num_classes,
	    .stem = c->model.stem == CFG_STEM_IMAGENET ? "imagenet" : "small",
	    .hidden = c->model.hidden.n ? c->model.hidden.v : (const int[]){0}, /* [] */
	    .nhidden = c->model.hidden.n,
	};
	if (nn_build(&m, be, &spec, err, errlen) < 0)
		goto out;
	have_model = 1;
	if (c->model.init) {
		if (nn_load_weights(&m, c->model.init, e2, sizeof(e2)) < 0) {
			failf(err, errlen, "model.init: %s", e2);
			goto out;
		}
	} else if (nn_init_weights(&m, (uint64_t)c->seed, err, errlen) < 0) {
		goto out;
	}

	if (env->comm) {
		const struct cfg_parallel *p = &c->parallel;
		size_t cap = (size_t)(p->bucket_cap_mb * 1024 * 1024);
		/* A small model would fit one or two 25 MB buckets, and the last one waits for the
		 * end of backward: no overlap at all. Buckets are also kept to a quarter of the
		 * gradient, down to DDP_MIN_SPLIT_BYTES, below which a bucket's latency would cost
		 * more than its overlap gains. */
		size_t quarter = m.param_total * sizeof(float) / 4;
		if (quarter < DDP_MIN_SPLIT_BYTES)
			quarter = DDP_MIN_SPLIT_BYTES;
		if (cap > quarter)
			cap = quarter;
		struct ddp_opts dop = {
		    .gradients_mean = p->gradients_mean,
		    .bucket_bytes = cap,
		    .first_bucket_bytes =
			cap < DDP_FIRST_BUCKET_BYTES ? cap : DDP_FIRST_BUCKET_BYTES,
		    .fusion_split = p->all_reduce_fusion_config.v,
		    .nfusion_split = p->all_reduce_fusion_config.n,
		};
		if (ddp_create(&ddp, &m, env->comm, &dop, err, errlen) < 0)
			goto out;
		if (p->parameter_broadcast && ddp_broadcast_params(ddp, err, errlen) < 0)
			goto out;
	}
	if (split_open(&tr, c, env, be, 1, err, errlen) < 0)
		goto out;
	if (c->data.eval.present && split_open(&ev, c, env, be, 0, err, errlen) < 0)
		goto out;
	size_t per_sample = (size_t)spec.c * (size_t)spec.h * (size_t)spec.w;
	int max_batch = c->data.batch_size > c->data.eval_batch_size ? c->data.batch_size
								     : c->data.eval_batch_size;
	if (stage_open(&st, be, (size_t)max_batch * per_sample, err, errlen) < 0)
		goto out;

	int accum = c->parallel.grad_accumulation_step;
	char le0[4096];
	if (loader_start_epoch(tr.l, 0, 0, le0) < 0) {
		failf(err, errlen, "data.train: %s", le0);
		goto out;
	}
	long batches = (long)loader_batches(tr.l);
	long spe = batches / accum;
	if (spe < 1) {
		failf(
		    err, errlen,
		    "parallel.grad_accumulation_step %d needs at least %d batches per epoch, rank "
		    "%d has %ld; lower it or data.batch_size",
		    accum, accum, env->rank, batches);
		goto out;
	}
	long total = c->train.epochs > 0 ? spe * c->train.epochs : c->train.max_steps;
	if (c->train.max_steps > 0 && c->train.max_steps < total)
		total = c->train.max_steps;
	int epochs = (int)((total + spe - 1) / spe);

	/* ZeRO-1: a rank keeps optimizer state for and updates only its comm_share */
	int zero = env->comm && c->parallel.enable_parallel_optimizer;
	size_t zlo = 0, zhi = m.param_total;
	if (zero)
		comm_share(m.param_total, env->rank, env->world_size, &zlo, &zhi);
	if (make_optimizer(&opt.o, c, &m, zlo, zhi, err, errlen) < 0)
		goto out;
	have_optim = 1;
	if (make_schedule(&sched, c, spe, total, err, errlen) < 0)
		goto out;

	struct train_ckpt ck;
	struct train_pos pos = {0};
	char from[1024];
	train_ckpt_init(&ck, c, env->output_dir, &m, &opt.o, env->comm, env->rank, env->world_size,
			tr.ds.count);
	int resumed = train_ckpt_resume(&ck, &pos, from, sizeof(from), err, errlen);
	if (resumed < 0)
		goto out;
	/* on a GPU the optimizer state lives there, from what the checkpoint had (or zeros) */
	if (env->gpu >= 0 && (optim_gpu_create(&opt.g, be, &opt.o, e2, sizeof(e2)) < 0 ||
			      optim_gpu_state_from_host(opt.g, &opt.o, e2, sizeof(e2)) < 0)) {
		failf(err, errlen, "optimizer on GPU %d: %s", env->gpu, e2);
		goto out;
	}
	/* rank 0 read the weights: everyone takes them, whatever parameter_broadcast says */
	if (resumed && ddp && ddp_broadcast_params(ddp, err, errlen) < 0)
		goto out;
	struct scaler sc = {
	    .on = c->precision.dynamic_loss_scale || c->precision.loss_scale != 1.0,
	    .dynamic = c->precision.dynamic_loss_scale,
	    .scale = c->precision.dynamic_loss_scale ? c->precision.initial_loss_scale
						     : c->precision.loss_scale,
	    .interval = c->precision.growth_interval > 0 ? c->precision.growth_interval : 2000,
	};
	if (resumed && sc.dynamic && pos.loss_scale > 0) { /* where it had got to */
		sc.scale = pos.loss_scale;
		sc.good = pos.scale_good;
	}
	if (resumed) {
		res->resumed_at = pos.step;
		if (rank0)
			fprintf(out, "dptrain: resuming from %s: step %ld, epoch %d, sample %zu\n",
				from, pos.step, pos.epoch + 1, pos.offset);
	}

	if (rank0 && c->output.metrics && env->output_dir) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/metrics.jsonl", env->output_dir);
		mt.f = fopen(path, "a");
		if (!mt.f) {
			failf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
			goto out;
		}
	}
	if (rank0) {
		char cpu[96], bdesc[128] = ""; /* the CPU's: oneDNN's version and ISA */
		if (env->gpu < 0) {
			be_cpu_describe(cpu, sizeof(cpu));
			snprintf(bdesc, sizeof(bdesc), " (%s)", cpu);
		}
		fprintf(
		    out,
		    "dptrain: %s, %zu parameters, %zu training samples (%ld steps/epoch of %d x "
		    "%d), %d epoch%s, %ld steps, backend %s%s\n",
		    m.name, nn_param_count(&m), tr.ds.count, spe, c->data.batch_size, accum, epochs,
		    epochs == 1 ? "" : "s", total, be->ops->name, bdesc);
	}
	if (ddp && rank0)
		fprintf(
		    out,
		    "dptrain: %d ranks, %s of %s on %s, %d gradient bucket%s, %d x %d samples per "
		    "step\n",
		    env->world_size, c->parallel.gradients_mean ? "average" : "sum", "gradients",
		    env->comm->ops->name, ddp_bucket_count(ddp),
		    ddp_bucket_count(ddp) == 1 ? "" : "s", env->world_size,
		    c->data.batch_size * accum);
	if (zero && rank0)
		fprintf(
		    out,
		    "dptrain: optimizer state sharded over %d ranks (ZeRO-1): rank 0 updates %zu "
		    "of %zu parameters\n",
		    env->world_size, zhi - zlo, m.param_total);
	metrics_line(&mt,
		     "{\"event\":\"start\",\"model\":\"%s\",\"parameters\":%zu,\"world_size\":%d,"
		     "\"steps_per_epoch\":%ld,\"total_steps\":%ld}",
		     m.name, nn_param_count(&m), env->world_size, spe, total);

	/* DPTRAIN_PROFILE_STEP=k: the vendor profiler captures step k alone (dptrain(1)) */
	int prof = 0;
	char pe[256];
	if (rt_env_int("DPTRAIN_PROFILE_STEP", 1, INT_MAX, &prof, pe, sizeof(pe)) < 0) {
		failf(err, errlen, "%s: the step to profile, from 1", pe);
		goto out;
	}
	if (prof && be->ops->profile) {
		if (prof == pos.step + 1 && be->ops->profile(be, 1) < 0) {
			failf(err, errlen, "DPTRAIN_PROFILE_STEP: %s", be->err);
			goto out;
		}
	}
	double t0 = now_s(), tlog = t0;
	long step = pos.step, imgs_since_log = 0;
	double loss_since_log = 0, wait_since_log = 0, data_since_log = 0;
	int n_since_log = 0;
	float scale = 1.0f / (float)accum;
	const struct cfg_checkpoint *cc = &c->checkpoint;
	size_t per_step = (size_t)c->data.batch_size * (size_t)accum; /* samples per rank */
	for (int epoch = pos.epoch; epoch < epochs && step < total; epoch++) {
		struct loader_batch *b;
		char le[4096];
		size_t start = epoch == pos.epoch ? pos.offset : 0;
		if (loader_start_epoch(tr.l, epoch, start, le) < 0) {
			failf(err, errlen, "data.train: %s", le);
			goto out;
		}
		/* steps left in this epoch, and where it started (for the epoch's step numbers) */
		long nsteps = (long)loader_batches(tr.l) / accum;
		long s0 = (long)(start / (per_step * (size_t)env->world_size));
		long s;
		for (s = s0; s < s0 + nsteps && step < total; s++) {
			double step_loss = 0;
			for (int micro = 0; micro < accum; micro++) {
				double tw = now_s();
				int got = loader_next(tr.l, &b, le);
				data_since_log += now_s() - tw; /* the input pipeline fell behind */
				if (got <= 0) {
					failf(err, errlen, "data.train: %s",
					      got < 0 ? le : "epoch ended early");
					goto out;
				}
				float *logits, loss;
				const float *x;
				int ok;
				if (ddp && ddp_broadcast_buffers(ddp, err, errlen) < 0) {
					loader_release(tr.l, b);
					goto out;
				}
				if (stage_put(&st, b, per_sample, &x, err, errlen) < 0 ||
				    nn_forward(&m, x, b->n, &logits, err, errlen) < 0 ||
				    nn_loss(&m, b->y, b->n, (float)c->train.label_smoothing,
					    scale * (float)sc.scale, &loss, &ok, err, errlen) < 0) {
					loader_release(tr.l, b);
					goto out;
				}
				if (!isfinite(loss)) {
					loader_release(tr.l, b);
					failf(err, errlen,
					      "loss is %s at epoch %d step %ld (global step %ld): "
					      "training stopped; lower optimizer.lr, check the "
					      "data, or "
					      "start from other weights",
					      isnan(loss) ? "nan" : "inf", epoch + 1, s + 1,
					      step + 1);
					goto out;
				}
				if (ddp &&
				    micro == accum - 1) /* asked to stop: vote with the gradients */
					ddp_set_vote(ddp, env->stop && *env->stop ? 1.0f : 0.0f);
				if ((ddp && ddp_begin_backward(ddp, micro == accum - 1, err,
							       errlen) < 0) ||
				    nn_backward(&m, b->n, micro ? 1.0f : 0.0f, err, errlen) < 0 ||
				    stage_done(&st, err, errlen) < 0 ||
				    (ddp && micro == accum - 1 &&
				     ddp_finish(ddp, err, errlen) < 0)) {
					loader_release(tr.l, b);
					goto out;
				}
				step_loss += loss;
				imgs_since_log += b->n;
				loader_release(tr.l, b);
			}
			if (ddp)
				wait_since_log += ddp_last_wait(ddp);
			double lr = lr_at(&sched, step);
			double step_scale = sc.scale;
			if (overflow_injected(step + 1) &&
			    be->ops->fill(be, m.grads, INFINITY, 1) < 0) {
				failf(err, errlen, "%s", be->err);
				goto out;
			}
			int go = scaler_check(&sc, &m, step + 1, out, rank0, err, errlen);
			if (go < 0)
				goto out;
			if (!go) {
				/* skipped: the weights and the optimizer stay as they were */
			} else if (zero) {
				if (zero_step(&opt, &m, env->comm, lr, err, errlen) < 0)
					goto out;
			} else if (!opt.g) {
				optim_step(&opt.o, m.weights, m.grads, lr);
			} else if (optim_gpu_step(opt.g, &opt.o, m.weights, m.grads, lr, e2,
						  sizeof(e2)) < 0) {
				failf(err, errlen, "optimizer step %ld: %s", step + 1, e2);
				goto out;
			}
			step++;
			if (prof && (step == prof - 1 || step == prof) &&
			    be->ops->profile(be, step == prof - 1) < 0) {
				failf(err, errlen, "DPTRAIN_PROFILE_STEP: %s", be->err);
				goto out;
			}
			step_loss /= accum;
			res->last_loss = step_loss;
			loss_since_log += step_loss;
			n_since_log++;
			if (c->train.log_every > 0 &&
			    (step % c->train.log_every == 0 || step == total)) {
				double t = now_s(), ips = imgs_since_log / (t - tlog + 1e-12);
				/* this rank's loss on its line; rank 0 also reports the mean over
				 * the ranks, the loss of the global batch */
				double gl[2] = {step_loss, loss_since_log / n_since_log};
				if (env->comm &&
				    env->comm->ops->allreduce(env->comm, gl, 2, COMM_F64, COMM_AVG,
							      le, sizeof(le)) < 0) {
					failf(err, errlen, "reducing the loss at step %ld: %s",
					      step, le);
					goto out;
				}
				if (env->comm && rank0)
					fprintf(
					    out,
					    "epoch: %d step: %ld, loss is %.6f, global loss %.6f, "
					    "lr %.6g, %.1f img/s\n",
					    epoch + 1, s + 1, step_loss, gl[0], lr,
					    ips * env->world_size);
				else
					fprintf(out,
						"epoch: %d step: %ld, loss is %.6f, lr %.6g, %.1f "
						"img/s\n",
						epoch + 1, s + 1, step_loss, lr,
						ips * env->world_size);
				fflush(out);
				metrics_line(&mt,
					     "{\"event\":\"train\",\"epoch\":%d,\"step\":%ld,"
					     "\"global_step\":%ld,\"loss\":%.9g,\"mean_loss\":%.9g,"
					     "\"rank0_loss\":%.9g,\"lr\":%.9g,\"img_per_s\":%.3f,"
					     "\"comm_wait_ms\":%.4f,\"data_wait_ms\":%.4f,"
					     "\"loss_scale\":%.9g}",
					     epoch + 1, s + 1, step, gl[0], gl[1], step_loss, lr,
					     ips * env->world_size,
					     1e3 * wait_since_log / n_since_log,
					     1e3 * data_since_log / n_since_log, step_scale);
				tlog = t;
				imgs_since_log = 0;
				loss_since_log = 0;
				wait_since_log = 0;
				data_since_log = 0;
				n_since_log = 0;
			}
			/* a stop request (SIGTERM, SIGUSR1) on any rank stops every rank after
			 * this same step: the ranks' votes travelled with the gradients */
			float votes = env->stop && *env->stop ? 1.0f : 0.0f;
			if (ddp && ddp_votes(ddp, &votes, err, errlen) < 0)
				goto out;
			int stop = votes > 0;
			int epoch_end = s + 1 == s0 + nsteps || step == total;
			if (stop ||
			    (cc->every_steps > 0 && step % cc->every_steps == 0 && !epoch_end)) {
				struct train_pos at = position(&tr.s, step, epoch, s + 1 - s0,
							       per_step, s + 1 == s0 + nsteps);
				at.loss_scale = sc.scale;
				at.scale_good = sc.good;
				if (save_checkpoint(&ck, &opt, &at, err, errlen) < 0)
					goto out;
				if (stop) {
					if (rank0)
						fprintf(out,
							"dptrain: stopping on request at step %ld; "
							"checkpoint %s/step-%ld\n",
							step, ck.root, step);
					res->stopped = 1;
					res->steps = step;
					res->seconds = now_s() - t0;
					rv = 0;
					goto out;
				}
			}
		}
		res->epochs = epoch + 1;
		int last = epoch + 1 == epochs || step >= total;
		int due = c->train.eval_every > 0 && (epoch + 1) % c->train.eval_every == 0;
		if (ev.l && (due || last)) {
			double lsum;
			long corr, cnt;
			/* every rank evaluates its shard with rank 0's BatchNorm statistics, the
			 * ones saved with the weights */
			if (ddp && ddp_broadcast_buffers(ddp, err, errlen) < 0)
				goto out;
			if (evaluate(&m, &ev, &st, env->comm, &lsum, &corr, &cnt, err, errlen) < 0)
				goto out;
			res->eval_accuracy = cnt ? (double)corr / (double)cnt : 0;
			res->eval_loss = cnt ? lsum / (double)cnt : 0;
			if (rank0) {
				fprintf(out, "epoch: %d eval: accuracy %.4f (%ld/%ld), loss %.6f\n",
					epoch + 1, res->eval_accuracy, corr, cnt, res->eval_loss);
				fflush(out);
			}
			metrics_line(
			    &mt,
			    "{\"event\":\"eval\",\"epoch\":%d,\"global_step\":%ld,"
			    "\"accuracy\":%.9g,\"loss\":%.9g,\"correct\":%ld,\"count\":%ld}",
			    epoch + 1, step, res->eval_accuracy, res->eval_loss, corr, cnt);
		}
		/* at the end of the epoch, or of training (max_steps may end it mid-epoch) */
		int save = (cc->every_epochs > 0 && (epoch + 1) % cc->every_epochs == 0) ||
			   (cc->every_steps > 0 && step % cc->every_steps == 0) || last;
		if (save && ck.last_saved != step) {
			struct train_pos at =
			    position(&tr.s, step, epoch, s - s0, per_step, s == s0 + nsteps);
			at.loss_scale = sc.scale;
			at.scale_good = sc.good;
			if (save_checkpoint(&ck, &opt, &at, err, errlen) < 0)
				goto out;
		}
	}
	res->steps = step;
	res->seconds = now_s() - t0;
	if (env->gpu >= 0) {
		res->peak_device_bytes = be_cuda_peak_bytes(be);
		fprintf(out, "dptrain: GPU memory peak %.0f MiB\n",
			(double)res->peak_device_bytes / (1 << 20));
	}

	if (rank0 && env->output_dir) {
		char path[4096], meta[256];
		snprintf(path, sizeof(path), "%s/model.safetensors", env->output_dir);
		snprintf(
		    meta, sizeof(meta),
		    "{\"format\":\"pt\",\"model\":\"%s\",\"step\":\"%ld\",\"producer\":\"dptrain "
		    "%s\"}",
		    m.name, step, DPTRAIN_VERSION);
		if (nn_save_weights(&m, path, meta, err, errlen) < 0)
			goto out;
	}
	metrics_line(&mt,
		     "{\"event\":\"end\",\"steps\":%ld,\"epochs\":%d,\"seconds\":%.3f,"
		     "\"eval_accuracy\":%.9g,\"peak_device_mib\":%.0f,\"skipped_steps\":%ld,"
		     "\"loss_scale\":%.9g}",
		     res->steps, res->epochs, res->seconds, res->eval_accuracy,
		     (double)res->peak_device_bytes / (1 << 20), sc.skipped, sc.scale);
	rv = 0;
out:
	if (rv < 0 && env->comm) { /* the other ranks stop too, told why */
		char why[4200];
		snprintf(why, sizeof(why), "rank %d stopped: %s", env->rank, err);
		env->comm->ops->abort(env->comm, why);
	}
	ddp_destroy(ddp);
	if (mt.f)
		fclose(mt.f);
	optim_gpu_destroy(opt.g);
	if (have_optim)
		optim_free(&opt.o);
	stage_close(&st);
	split_free(&tr);
	split_free(&ev);
	if (have_model)
		nn_free(&m);
	if (be)
		be->ops->destroy(be);
	return rv;
}
