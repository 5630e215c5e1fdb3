/* train.c — the training loop: config -> backend, model, data, optimizer, schedule; then
 * epochs of (micro-)steps with MindSpore-style loss lines, evaluation, a metrics JSONL file
 * and the final weights. With several ranks, ddp reduces the gradients during backward, the
 * evaluation is sharded and reduced, and rank 0 reports the global figures. */
#define _GNU_SOURCE
#include "trainer/train.h"
#include "common/env.h"
#include "common/envint.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "trainer/backend/backend.h"
#include "trainer/dist/comm.h"
#include "trainer/data/data.h"
#include "trainer/dist/ddp.h"
#include "common/error.h"
#include "common/clock.h"
#include "common/warn.h"
#include "trainer/data/loader.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/nn/nn.h"
#include "trainer/optim/optim.h"
#include "ranktable/ranktable.h"
#include "trainer/optim/optim_exec.h"
#include "trainer/data/sampler.h"
#include "trainer/train_ckpt.h"
#include "trainer/loss_scale.h"
#include "trainer/metrics.h"
#include "trainer/tbevents.h"
#include "trainer/report.h"
#include "trainer/progress.h"
#include "trainer/rankwatch.h"
#include "trainer/data/transform.h"

/* One split of the data (train or eval): set, transforms, sampler, loader. */
struct split {
	struct data_set ds;
	struct tf tf;
	struct imtf imtf; /* encoded sets */
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
		    const char *what, const char *cache_dir, struct dp_error *err)
{
	int rv = -1;
	switch (c->data.format) {
	case CFG_DATA_IMAGEFOLDER:
		rv = data_load_imagefolder(ds, src->root, src->index, cache_dir, err);
		break;
	case CFG_DATA_SHARDS:
		rv = data_load_shards(ds, src->root, err);
		break;
	case CFG_DATA_IDX:
		rv = data_load_idx(ds, src->images, src->labels, err);
		break;
	case CFG_DATA_CIFAR10:
		rv = data_load_cifar10(ds, src->files.n, (const char *const *)src->files.v, err);
		break;
	case CFG_DATA_SYNTHETIC:
		rv = data_synthetic(ds, (size_t)src->size, c->model.input_shape[0],
				    c->model.input_shape[1], c->model.input_shape[2],
				    c->model.num_classes,
				    (uint64_t)c->data.seed + (strcmp(what, "eval") == 0), err);
		break;
	}
	if (rv < 0)
		return errprefix(err, "data.%s", what);
	if (!ds->encoded &&
	    (ds->channels != c->model.input_shape[0] || ds->height != c->model.input_shape[1] ||
	     ds->width != c->model.input_shape[2])) {
		errprintf(
		    err,
		    "data.%s: %s holds %dx%dx%d images but model.input_shape is [%d, %d, %d]; "
		    "set model.input_shape to match the data",
		    what, ds->name, ds->channels, ds->height, ds->width, c->model.input_shape[0],
		    c->model.input_shape[1], c->model.input_shape[2]);
		data_free(ds);
		return -1;
	}
	if (ds->num_classes > c->model.num_classes) {
		errprintf(err,
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

/* Images of any size: RandomResizedCrop + flip (train) or Resize + CenterCrop (eval). */
static int image_tf(struct imtf *t, const struct cfg *c, int train, struct dp_error *err)
{
	const struct cfg_transforms *tr = &c->data.transforms;
	struct imtf_spec s = {
	    .mode = train ? IMTF_TRAIN : IMTF_EVAL,
	    .channels = c->model.input_shape[0],
	    .size = c->model.input_shape[1],
	    .resize = tr->eval_resize,
	    .scale = {tr->random_resized_crop.scale.v[0], tr->random_resized_crop.scale.v[1]},
	    .ratio = {tr->random_resized_crop.ratio.v[0], tr->random_resized_crop.ratio.v[1]},
	    .flip_p = train && tr->horizontal_flip ? 0.5 : 0,
	    /* eval stays torchvision's pixels: full-size decode */
	    .dct_scaling = train && tr->dct_scaling,
	    .seed = (uint64_t)c->data.seed,
	};
	if (tr->normalize.enabled)
		for (int i = 0; i < tr->normalize.mean.n && i < IMG_MAX_CHANNELS; i++) {
			s.mean[i] = (float)tr->normalize.mean.v[i];
			s.std[i] = (float)tr->normalize.std.v[i];
		}
	if (imtf_init(t, &s, err) < 0)
		return errprefix(err, "data.transforms");
	return 0;
}

static int split_transform(struct split *sp, const struct cfg *c, int train, struct dp_error *err)
{
	if (sp->ds.encoded)
		return image_tf(&sp->imtf, c, train, err);
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
	if (tf_init(&sp->tf, &ts, sp->ds.channels, sp->ds.height, sp->ds.width, err) < 0)
		return errprefix(err, "data.transforms");
	return 0;
}

static int split_open(struct split *sp, const struct cfg *c, const struct train_env *env,
		      struct backend *be, int train, struct dp_error *err)
{
	const char *what = train ? "train" : "eval";
	if (load_set(&sp->ds, c, train ? &c->data.train : &c->data.eval, what, env->output_dir,
		     err) < 0)
		return -1;
	sp->have_ds = 1;
	if (split_transform(sp, c, train, err) < 0)
		return -1;
	int rv =
	    train ? sampler_init(&sp->s, sp->ds.count, env->world_size, env->rank, c->data.shuffle,
				 (uint64_t)c->data.seed, c->data.drop_remainder, err)
		  : sampler_init_eval(&sp->s, sp->ds.count, env->world_size, env->rank, err);
	if (rv < 0)
		return errprefix(err, "data.%s", what);
	sp->have_s = 1;
	struct loader_opts lo = {
	    .batch_size = train ? c->data.batch_size : c->data.eval_batch_size,
	    .drop_remainder = train ? c->data.drop_remainder : false,
	    .workers = c->data.workers,
	    .prefetch = c->data.prefetch,
	    .imtf = sp->ds.encoded ? &sp->imtf : NULL,
	    .max_bad = c->data.max_bad,
	    .what = train ? "data.train" : "data.eval",
	};
	if (be->ops->host_alloc)
		lo.alloc =
		    (struct loader_alloc){.alloc = pinned_alloc, .free = pinned_free, .ctx = be};
	/* decoded images go to a device as bytes, normalised there (a quarter of the traffic) */
	lo.u8 = sp->ds.encoded && be->ops->upload && be->ops->input_u8;
	if (loader_create(&sp->l, &sp->ds, &sp->s, sp->ds.encoded ? NULL : &sp->tf, &lo, err) < 0)
		return errprefix(err, "data.%s", what);
	return 0;
}

/* The input's way to the backend. A host backend reads the loader's buffer itself. A device
 * backend gets the batch uploaded from the loader's page-locked buffer into one of two device
 * buffers by a copy engine, while the work of the step before still runs on the GPU; a buffer
 * is reused once the work that read it (forward and backward) is done. */
struct stage {
	struct backend *be;
	float *x[2];
	uint8_t *u8[2]; /* uint8 batches (loader_opts.u8) land here, then input_u8 into x */
	size_t cap;	/* floats in each */
	void *done[2];	/* the upload into x[i] is over (its source may change) */
	void *used[2];	/* the work reading x[i] is over */
	int next, cur;
};

static int stage_open(struct stage *st, struct backend *be, size_t floats, int u8,
		      struct dp_error *err)
{
	memset(st, 0, sizeof(*st));
	st->be = be;
	if (!be->ops->upload)
		return 0;
	st->cap = floats;
	for (int i = 0; i < 2; i++)
		if (!(st->x[i] = be->ops->alloc(be, floats * sizeof(float))) ||
		    (u8 && !(st->u8[i] = be->ops->alloc(be, floats))))
			return errprintf(err, "input buffers on the %s backend: %s", be->ops->name,
					 be->err.text);
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
		if (st->u8[i])
			be->ops->free(be, st->u8[i]);
	}
	memset(st, 0, sizeof(*st));
}

/* The batch's images where the backend's ops can read them. A uint8 batch (its images' imtf
 * t says how to normalise) is uploaded as bytes and made float32 NCHW on the device. */
static int stage_put(struct stage *st, const struct loader_batch *b, size_t per_sample,
		     const struct imtf *t, const float **x, struct dp_error *err)
{
	struct backend *be = st->be;
	size_t n = (size_t)b->n * per_sample;
	if (!be->ops->upload) {
		*x = b->x;
		return 0;
	}
	int i = st->next;
	if (n > st->cap)
		return errprintf(err, "a batch of %d samples does not fit the input buffers", b->n);
	if (b->u8) {
		int c = t->spec.channels, s = t->spec.size;
		if (!st->u8[i])
			return errprintf(err, "a uint8 batch without its device buffers");
		if (be->ops->mark_wait(be, st->used[i]) < 0 ||
		    be->ops->upload(be, st->u8[i], b->u8, n, &st->done[i]) < 0 ||
		    be->ops->input_u8(be, st->u8[i], st->x[i], b->n, c, s, s, t->mean, t->std) < 0)
			return errprintf(err, "uploading a batch: %s", be->err.text);
	} else if (be->ops->mark_wait(be, st->used[i]) < 0 ||
		   be->ops->upload(be, st->x[i], b->x, n * sizeof(float), &st->done[i]) < 0) {
		return errprintf(err, "uploading a batch: %s", be->err.text);
	}
	st->cur = i;
	st->next = i ^ 1;
	*x = st->x[i];
	return 0;
}

/* The work reading the current batch is issued: remember where it ends, and wait for the
 * upload to be over before the loader may refill the batch's buffer. */
static int stage_done(struct stage *st, struct dp_error *err)
{
	struct backend *be = st->be;
	if (!be->ops->upload)
		return 0;
	if (be->ops->mark(be, &st->used[st->cur]) < 0 ||
	    be->ops->mark_wait(be, st->done[st->cur]) < 0)
		return errprintf(err, "after a batch: %s", be->err.text);
	return 0;
}

/* [lo, hi) is the part of the flat buffers this rank updates: all of it, or with
 * parallel.enable_parallel_optimizer its equal contiguous share (ZeRO-1). */
static int make_optimizer(struct optim *o, const struct cfg *c, const struct nn_model *m, size_t lo,
			  size_t hi, struct dp_error *err)
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
		return errprintf(err, "out of memory");
	for (int i = 0; i < m->nparams; i++) {
		segs[i].name = m->params[i].name;
		segs[i].offset = m->params[i].offset;
		segs[i].count = m->params[i].count;
		segs[i].decay = p.weight_decay != 0.0 &&
				!(c->optimizer.no_decay_bn_bias && m->params[i].is_bn_or_bias);
	}
	int rv = lo == 0 && hi == m->param_total
		     ? optim_init(o, &p, segs, m->nparams, m->param_total, err)
		     : optim_init_shard(o, &p, segs, m->nparams, m->param_total, lo, hi, err);
	free(segs);
	return rv;
}

static int make_schedule(struct lr_schedule *s, const struct cfg *c, long steps_per_epoch,
			 long total_steps, struct dp_error *err)
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
		return errprintf(err, "lr_schedule.milestones: at most %d",
				 LR_SCHEDULE_MAX_MILESTONES);
	for (int i = 0; i < l->milestones.n; i++)
		p.milestones[i] = l->milestones.v[i];
	p.nmilestones = l->milestones.n;
	if (p.total_steps < 1)
		p.total_steps = 1;
	if (p.warmup_steps >= p.total_steps && p.kind == LR_SCHEDULE_COSINE)
		p.warmup_steps = p.total_steps - 1;
	if (lr_schedule_init(s, &p, err) < 0)
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
static int zero_step(struct optim_exec *x, struct nn_model *m, struct comm *comm, double lr,
		     struct dp_error *err)
{
	double norm = 0, *sums = NULL;
	int ns = optim_nsums(x->o), rv = -1;
	if (optim_needs_grad_norm(x->o)) {
		double gsq;
		if (x->ops->grad_sumsq(x, m->grads, &gsq, err) < 0 ||
		    comm->ops->allreduce(comm, &gsq, 1, COMM_F64, COMM_SUM, err) < 0)
			goto fail;
		norm = sqrt(gsq);
	}
	if (!(sums = calloc((size_t)ns + 1, sizeof(*sums))))
		return errprintf(err, "out of memory");
	if (x->ops->prepare(x, m->weights, m->grads, norm, sums, err) < 0 ||
	    (ns > 0 && comm->ops->allreduce(comm, sums, (size_t)ns, COMM_F64, COMM_SUM, err) < 0) ||
	    x->ops->apply(x, m->weights, m->grads, lr, sums, err) < 0)
		goto fail;
	/* the shards go out from the backend's memory once the update is written there */
	if (m->be->ops->sync(m->be) < 0) {
		errprintf(err, "%s", m->be->err.text);
		goto fail;
	}
	if (comm_gather_shares(comm, m->weights, m->param_total, err) < 0)
		goto fail;
	rv = 0;
	goto out;
fail:
	errprefix(err, "sharded optimizer step");
out:
	free(sums);
	return rv;
}

/* Evaluate on this rank's shard of the eval set: sum of per-sample losses and correct
 * predictions, and the count; with a comm, summed over the ranks' shards. */
static int evaluate(struct nn_model *m, struct split *ev, struct stage *st, struct comm *comm,
		    double *loss_sum, long *correct, long *count, struct dp_error *err)
{
	size_t per_sample = (size_t)m->in_c * (size_t)m->in_h * (size_t)m->in_w;
	struct loader_batch *b;
	int rv;
	*loss_sum = 0;
	*correct = 0;
	*count = 0;
	nn_set_training(m, 0);
	if (loader_start_epoch(ev->l, 0, 0, err) < 0) {
		nn_set_training(m, 1);
		return errprefix(err, "data.eval");
	}
	while ((rv = loader_next(ev->l, &b, err)) == 1) {
		float *logits, loss;
		const float *x;
		int ok;
		if (stage_put(st, b, per_sample, ev->ds.encoded ? &ev->imtf : NULL, &x, err) < 0 ||
		    nn_forward(m, x, b->n, &logits, err) < 0 ||
		    nn_loss(m, b->y, b->n, 0.0f, 1.0f, &loss, &ok, err) < 0 ||
		    stage_done(st, err) < 0) {
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
		return errprefix(err, "data.eval");
	if (comm) { /* every sample was seen by exactly one rank: the sums are the whole set's */
		double sums[3] = {*loss_sum, (double)*correct, (double)*count};
		if (comm->ops->allreduce(comm, sums, 3, COMM_F64, COMM_SUM, err) < 0)
			return errprefix(err, "evaluation");
		*loss_sum = sums[0];
		*correct = (long)sums[1];
		*count = (long)sums[2];
	}
	return 0;
}

/* One run, from setup to teardown: what train_run's steps share. */
struct run {
	const struct cfg *c;
	const struct train_env *env;
	struct train_result *res;
	FILE *out;
	int rank0;

	struct backend *be;
	struct nn_model m;
	int have_model, have_optim;
	struct ddp *ddp; /* NULL for one rank */
	struct split tr, ev;
	struct stage st;
	struct optim o;
	struct optim_exec ox; /* o's updates, where the parameters are */
	struct lr_schedule sched;
	struct train_ckpt ck;
	struct loss_scale sc;
	struct metrics mt;
	struct tbevents tb;    /* rank 0's TensorBoard event file */
	struct progress pg;    /* the loss and progress lines */
	struct rankwatch rw;   /* every rank's timings at rank 0, stragglers */
	char outdir[PATH_MAX]; /* env->output_dir, absolute where it can be made so */

	size_t per_sample; /* floats in one input sample */
	size_t per_step;   /* samples per rank in one step */
	int accum;	   /* micro-batches per step */
	long spe, total;   /* steps per epoch, steps in all */
	int epochs;
	int zero;	      /* ZeRO-1: the optimizer state sharded over the ranks */
	size_t zlo, zhi;      /* this rank's share of the parameters */
	int prof;	      /* DPTRAIN_PROFILE_STEP, 0: none */
	struct train_pos pos; /* where training starts (a checkpoint's position, or 0) */
	long step;	      /* steps done */
	double t0;

	struct { /* since the last progress line */
		double t, loss, comm_wait, data_wait, step_time;
		long imgs;
		int n;
	} log;
};

/* The backend: CUDA on env->gpu, else the CPU. */
static int run_backend(struct run *r, struct dp_error *err)
{
	const struct cfg *c = r->c;
	if (r->env->gpu >= 0) {
		enum cfg_precision_mode pm = c->precision.mode;
		struct be_cuda_opts co = {.tf32 = pm != CFG_PREC_FP32,
					  .deterministic = c->device.deterministic,
					  .act_dtype = pm == CFG_PREC_BF16   ? BE_BF16
						       : pm == CFG_PREC_FP16 ? BE_F16
									     : BE_F32};
		if (!(r->be = be_cuda_create(r->env->gpu, &co, err)))
			return -1;
		return 0;
	}
	/* bf16 on the CPU: acts, convolutions and matrix products in bfloat16 where the CPU has
	 * it in hardware (AVX512_BF16, AMX); refused where it does not, not emulated */
	struct be_cpu_opts o = {.act_dtype = BE_F32};
	struct dp_error why;
	if (c->precision.mode == CFG_PREC_BF16) {
		if (!be_cpu_bf16(&why))
			return errprintf(err,
					 "precision.mode bf16: %s; use \"fp32\" on this CPU (or "
					 "run on a GPU)",
					 why.text);
		o.act_dtype = BE_BF16;
	}
	r->be = be_cpu_create_opts(c->train.threads ? c->train.threads : r->env->threads, &o, err);
	if (!r->be)
		return errprefix(err, "cpu backend");
	/* fp16 is a GPU mode: device.kind auto on a machine without a GPU (with device.kind cpu
	 * the config check has already refused it) */
	if (r->rank0 && c->device.kind != CFG_DEVICE_CPU && c->precision.mode == CFG_PREC_FP16)
		dp_warn("dptrain", NULL,
			"precision.mode fp16 is a GPU mode; the CPU computes in fp32 (loss scaling "
			"as precision.loss_scale says)");
	return 0;
}

/* The model, with its first weights (model.init's, or drawn from the seed). */
static int run_model(struct run *r, struct dp_error *err)
{
	const struct cfg *c = r->c;
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
	if (nn_build(&r->m, r->be, &spec, err) < 0)
		return -1;
	r->have_model = 1;
	r->per_sample = (size_t)spec.c * (size_t)spec.h * (size_t)spec.w;
	if (c->model.init) {
		if (nn_load_weights(&r->m, c->model.init, err) < 0)
			return errprefix(err, "model.init");
		return 0;
	}
	return nn_init_weights(&r->m, (uint64_t)c->seed, err);
}

/* DDP over env->comm: the gradient buckets, and rank 0's weights to everyone. */
static int run_ddp(struct run *r, struct dp_error *err)
{
	const struct cfg_parallel *p = &r->c->parallel;
	size_t cap = (size_t)(p->bucket_cap_mb * 1024 * 1024);
	if (!r->env->comm)
		return 0;
	/* A small model would fit one or two 25 MB buckets, and the last one waits for the end
	 * of backward: no overlap at all. Buckets are also kept to a quarter of the gradient,
	 * down to DDP_MIN_SPLIT_BYTES, below which a bucket's latency would cost more than its
	 * overlap gains. */
	size_t quarter = r->m.param_total * sizeof(float) / 4;
	if (quarter < DDP_MIN_SPLIT_BYTES)
		quarter = DDP_MIN_SPLIT_BYTES;
	if (cap > quarter)
		cap = quarter;
	struct ddp_opts dop = {
	    .gradients_mean = p->gradients_mean,
	    .bucket_bytes = cap,
	    .first_bucket_bytes = cap < DDP_FIRST_BUCKET_BYTES ? cap : DDP_FIRST_BUCKET_BYTES,
	    .fusion_split = p->all_reduce_fusion_config.v,
	    .nfusion_split = p->all_reduce_fusion_config.n,
	};
	if (ddp_create(&r->ddp, &r->m, r->env->comm, &dop, err) < 0)
		return -1;
	if (p->parameter_broadcast && ddp_broadcast_params(r->ddp, err) < 0)
		return -1;
	return 0;
}

/* The data (train and eval splits, the input's stage) and the run's length in steps. */
static int run_data(struct run *r, struct dp_error *err)
{
	const struct cfg *c = r->c;
	if (split_open(&r->tr, c, r->env, r->be, 1, err) < 0)
		return -1;
	if (c->data.eval.present && split_open(&r->ev, c, r->env, r->be, 0, err) < 0)
		return -1;
	int max_batch = c->data.batch_size > c->data.eval_batch_size ? c->data.batch_size
								     : c->data.eval_batch_size;
	int u8 = r->tr.ds.encoded && r->be->ops->input_u8;
	if (stage_open(&r->st, r->be, (size_t)max_batch * r->per_sample, u8, err) < 0)
		return -1;
	r->accum = c->parallel.grad_accumulation_step;
	r->per_step = (size_t)c->data.batch_size * (size_t)r->accum;
	if (loader_start_epoch(r->tr.l, 0, 0, err) < 0)
		return errprefix(err, "data.train");
	long batches = (long)loader_batches(r->tr.l);
	r->spe = batches / r->accum;
	if (r->spe < 1)
		return errprintf(
		    err,
		    "parallel.grad_accumulation_step %d needs at least %d batches per epoch, rank "
		    "%d has %ld; lower it or data.batch_size",
		    r->accum, r->accum, r->env->rank, batches);
	r->total = c->train.epochs > 0 ? r->spe * c->train.epochs : c->train.max_steps;
	if (c->train.max_steps > 0 && c->train.max_steps < r->total)
		r->total = c->train.max_steps;
	r->epochs = (int)((r->total + r->spe - 1) / r->spe);
	return 0;
}

/* The optimizer and the schedule, then the checkpoint to resume from, if any: weights,
 * optimizer state, position and loss scale. */
static int run_optimizer(struct run *r, struct dp_error *err)
{
	const struct cfg *c = r->c;
	const struct train_env *env = r->env;
	char from[1024];
	/* ZeRO-1: a rank keeps optimizer state for and updates only its comm_share */
	r->zero = env->comm && c->parallel.enable_parallel_optimizer;
	r->zlo = 0;
	r->zhi = r->m.param_total;
	if (r->zero)
		comm_share(r->m.param_total, env->rank, env->world_size, &r->zlo, &r->zhi);
	if (make_optimizer(&r->o, c, &r->m, r->zlo, r->zhi, err) < 0)
		return -1;
	r->have_optim = 1;
	optim_exec_host(&r->ox, &r->o);
	if (make_schedule(&r->sched, c, r->spe, r->total, err) < 0)
		return -1;
	train_ckpt_init(&r->ck, c, env->output_dir, &r->m, &r->o, env->comm, env->rank,
			env->world_size, r->tr.ds.count);
	int resumed = train_ckpt_resume(&r->ck, &r->pos, from, sizeof(from), err);
	if (resumed < 0)
		return -1;
	/* on a GPU the optimizer state lives there, from what the checkpoint had (or zeros) */
	if (env->gpu >= 0 && (optim_exec_gpu(&r->ox, &r->o, r->be, err) < 0 ||
			      r->ox.ops->state_from_host(&r->ox, err) < 0))
		return errprefix(err, "optimizer on GPU %d", env->gpu);
	/* rank 0 read the weights: everyone takes them, whatever parameter_broadcast says */
	if (resumed && r->ddp && ddp_broadcast_params(r->ddp, err) < 0)
		return -1;
	loss_scale_init(&r->sc, &c->precision);
	if (resumed && r->sc.dynamic && r->pos.loss_scale > 0) { /* where it had got to */
		r->sc.scale = r->pos.loss_scale;
		r->sc.good = r->pos.scale_good;
	}
	if (resumed)
		r->sc.skipped = r->pos.skipped;
	if (resumed) {
		r->res->resumed_at = r->pos.step;
		snprintf(r->res->last_checkpoint, sizeof(r->res->last_checkpoint), "%s", from);
		if (r->rank0)
			fprintf(r->out,
				"dptrain: resuming from %s: step %ld, epoch %d, sample %zu\n", from,
				r->pos.step, r->pos.epoch + 1, r->pos.offset);
	}
	return 0;
}

/* Rank 0's metrics file and first lines; the profiler armed for DPTRAIN_PROFILE_STEP. */
static int run_announce(struct run *r, struct dp_error *err)
{
	const struct cfg *c = r->c;
	const struct train_env *env = r->env;
	struct nn_model *m = &r->m;
	FILE *out = r->out;
	if (r->rank0 && c->output.metrics && env->output_dir &&
	    metrics_open(&r->mt, env->output_dir, err) < 0)
		return -1;
	/* a new event file; a resumed run's curves go on from the checkpoint's step */
	if (r->rank0 && c->output.tensorboard && env->output_dir &&
	    tb_open(&r->tb, env->output_dir, r->pos.step + 1, err) < 0)
		return -1;
	if (r->rank0) {
		char cpu[96], bdesc[128] = ""; /* the CPU's: oneDNN's version and ISA */
		if (env->gpu < 0) {
			be_cpu_describe(cpu, sizeof(cpu));
			snprintf(bdesc, sizeof(bdesc), " (%s)", cpu);
		}
		fprintf(out,
			"dptrain: %s, %zu parameters, %zu training samples (%ld steps/epoch of %d "
			"x %d), %d epoch%s, %ld steps, backend %s%s\n",
			m->name, nn_param_count(m), r->tr.ds.count, r->spe, c->data.batch_size,
			r->accum, r->epochs, r->epochs == 1 ? "" : "s", r->total, r->be->ops->name,
			bdesc);
	}
	if (r->ddp && r->rank0)
		fprintf(
		    out,
		    "dptrain: %d ranks, %s of %s on %s%s, %d gradient bucket%s, %d x %d samples "
		    "per step\n",
		    env->world_size, c->parallel.gradients_mean ? "average" : "sum", "gradients",
		    env->comm->ops->name,
		    ddp_grads_shared(r->ddp) ? ", gradients in shared memory reduced in place" : "",
		    ddp_bucket_count(r->ddp), ddp_bucket_count(r->ddp) == 1 ? "" : "s",
		    env->world_size, c->data.batch_size * r->accum);
	if (r->zero && r->rank0)
		fprintf(out,
			"dptrain: optimizer state sharded over %d ranks (ZeRO-1): rank 0 updates "
			"%zu of %zu parameters\n",
			env->world_size, r->zhi - r->zlo, m->param_total);
	/* every rank's node and GPU at rank 0 (a collective: every rank is here) */
	if (rankwatch_open(&r->rw, env->comm, env->rank, env->world_size, env->gpu,
			   c->train.log_every, c->train.straggler_window,
			   c->train.straggler_threshold, err) < 0)
		return -1;
	const char *rc = getenv(ENV_SLURM_RESTART_COUNT);
	char job[64], dir[2 * PATH_MAX];
	metrics_line(&r->mt,
		     "{\"event\":\"start\",\"model\":\"%s\",\"parameters\":%zu,\"world_size\":%d,"
		     "\"steps_per_epoch\":%ld,\"total_steps\":%ld,\"schema\":2,"
		     "\"resumed_from_step\":%ld,\"job\":\"%s\",\"restart_count\":%d,"
		     "\"output_dir\":\"%s\",\"hosts\":%d,\"backend\":\"%s\",\"batch_size\":%d,"
		     "\"log_every\":%ld}",
		     m->name, nn_param_count(m), env->world_size, r->spe, r->total, r->pos.step,
		     metrics_json_str(job, sizeof(job), getenv(ENV_SLURM_JOB_ID)),
		     rc ? atoi(rc) : 0, metrics_json_str(dir, sizeof(dir), r->outdir), r->rw.nnodes,
		     r->be->ops->name, c->data.batch_size, (long)c->train.log_every);

	/* DPTRAIN_PROFILE_STEP=k: the vendor profiler captures step k alone (dptrain(1)) */
	if (dp_env_int(ENV_DPTRAIN_PROFILE_STEP, 1, INT_MAX, &r->prof, err) < 0)
		return errprintf(err, "%s: the step to profile, from 1", err->text);
	if (r->prof && r->be->ops->profile && r->prof == r->pos.step + 1 &&
	    r->be->ops->profile(r->be, 1) < 0)
		return errprintf(err, "DPTRAIN_PROFILE_STEP: %s", r->be->err.text);
	return 0;
}

/* One micro-batch of step `s` (of epoch `epoch`): forward, loss, backward; the last one of
 * the step carries this rank's stop vote and waits for DDP's reduction. */
static int run_micro(struct run *r, int epoch, long s, int micro, double *step_loss,
		     struct dp_error *err)
{
	const struct train_env *env = r->env;
	struct ddp *ddp = r->ddp;
	struct loader_batch *b;
	int last = micro == r->accum - 1, rv = -1;
	double tw = now_s();
	int got = loader_next(r->tr.l, &b, err);
	r->log.data_wait += now_s() - tw; /* the input pipeline fell behind */
	if (got < 0)
		return errprefix(err, "data.train");
	if (got == 0)
		return errprintf(err, "data.train: epoch ended early");
	float *logits, loss;
	const float *x;
	int ok;
	if (ddp && ddp_broadcast_buffers(ddp, err) < 0)
		goto out;
	if (stage_put(&r->st, b, r->per_sample, r->tr.ds.encoded ? &r->tr.imtf : NULL, &x, err) <
		0 ||
	    nn_forward(&r->m, x, b->n, &logits, err) < 0 ||
	    nn_loss(&r->m, b->y, b->n, (float)r->c->train.label_smoothing,
		    (float)(1.0f / (float)r->accum) * (float)r->sc.scale, &loss, &ok, err) < 0)
		goto out;
	if (!isfinite(loss)) {
		errprintf(
		    err,
		    "loss is %s at epoch %d step %ld (global step %ld): training stopped; lower "
		    "optimizer.lr, check the data, or start from other weights",
		    isnan(loss) ? "nan" : "inf", epoch + 1, s + 1, r->step + 1);
		goto out;
	}
	if (ddp && last) /* asked to stop: vote with the gradients */
		ddp_set_vote(ddp, env->stop && *env->stop ? 1.0f : 0.0f);
	if ((ddp && ddp_begin_backward(ddp, last, err) < 0) ||
	    nn_backward(&r->m, b->n, micro ? 1.0f : 0.0f, err) < 0 || stage_done(&r->st, err) < 0 ||
	    (ddp && last && ddp_finish(ddp, err) < 0))
		goto out;
	*step_loss += loss;
	r->log.imgs += b->n;
	rv = 0;
out:
	loader_release(r->tr.l, b);
	return rv;
}

/* The update after a step's gradients: unscaled (or the step skipped on an overflow), then
 * the optimizer, sharded (ZeRO-1) or whole. */
static int run_update(struct run *r, double lr, struct dp_error *err)
{
	struct nn_model *m = &r->m;
	if (loss_scale_test_overflow(r->step + 1) &&
	    r->be->ops->fill(r->be, m->grads, INFINITY, 1) < 0)
		return errprintf(err, "%s", r->be->err.text);
	int go = loss_scale_check(&r->sc, m, r->step + 1, r->out, r->rank0, err);
	if (go <= 0) /* skipped: the weights and the optimizer stay as they were */
		return go;
	if (r->zero)
		return zero_step(&r->ox, m, r->env->comm, lr, err);
	if (r->ox.ops->step(&r->ox, m->weights, m->grads, lr, err) < 0)
		return errprefix(err, "optimizer step %ld", r->step + 1);
	return 0;
}

/* run_log's scalars in the event file, as in its metrics line: the global loss, the
 * learning rate, img/s, rank 0's step time and its parts (ms), and the loss scale where
 * scaling is on. */
static void run_log_tb(struct run *r, double loss, double lr, double ips, double scale,
		       const struct rank_fig *me)
{
	const char *tags[] = {"train/loss",	    "train/lr",		  "train/img_per_s",
			      "train/data_wait_ms", "train/comm_wait_ms", "train/step_ms",
			      "train/compute_ms",   "train/loss_scale"};
	double v[] = {loss,	      lr,   ips, me->data_wait_ms, me->comm_wait_ms, me->step_ms,
		      me->compute_ms, scale};
	tb_scalars(&r->tb, r->step, r->sc.on ? 8 : 7, tags, v);
}

/* After a report, rank 0: every rank's step time and its parts, as in the ranks event, one
 * chart a figure and rank (ranks/rank_N/step_ms, ...). */
static void run_ranks_tb(struct run *r)
{
	struct rank_fig f;
	for (int k = 0; r->tb.open && rankwatch_get(&r->rw, k, &f) == 0; k++) {
		char t[4][48];
		const char *tags[4] = {t[0], t[1], t[2], t[3]};
		snprintf(t[0], sizeof(t[0]), "ranks/rank_%d/step_ms", k);
		snprintf(t[1], sizeof(t[1]), "ranks/rank_%d/compute_ms", k);
		snprintf(t[2], sizeof(t[2]), "ranks/rank_%d/data_wait_ms", k);
		snprintf(t[3], sizeof(t[3]), "ranks/rank_%d/comm_wait_ms", k);
		double v[] = {f.step_ms, f.compute_ms, f.data_wait_ms, f.comm_wait_ms};
		tb_scalars(&r->tb, r->step, 4, tags, v);
	}
}

/* Every train.log_every steps, and at the last: this rank's loss line (rank 0's with the
 * global batch's loss, the mean over the ranks) and a metrics line. */
static int run_log(struct run *r, int epoch, long s, double step_loss, double lr, double step_scale,
		   struct dp_error *err)
{
	const struct train_env *env = r->env;
	r->log.loss += step_loss;
	r->log.n++;
	if (r->c->train.log_every <= 0 ||
	    (r->step % r->c->train.log_every != 0 && r->step != r->total))
		return 0;
	double t = now_s(), ips = (double)r->log.imgs / (t - r->log.t + 1e-12);
	/* this rank's loss on its line; rank 0 also reports the mean over the ranks, the loss
	 * of the global batch */
	double gl[2] = {step_loss, r->log.loss / r->log.n};
	if (env->comm && env->comm->ops->allreduce(env->comm, gl, 2, COMM_F64, COMM_AVG, err) < 0)
		return errprefix(err, "reducing the loss at step %ld", r->step);
	char line[256];
	if (env->comm && r->rank0)
		snprintf(line, sizeof(line),
			 "epoch: %d step: %ld, loss is %.6f, global loss %.6f, lr %.6g, %.1f img/s",
			 epoch + 1, s + 1, step_loss, gl[0], lr, ips * env->world_size);
	else
		snprintf(line, sizeof(line),
			 "epoch: %d step: %ld, loss is %.6f, lr %.6g, %.1f img/s", epoch + 1, s + 1,
			 step_loss, lr, ips * env->world_size);
	progress_loss(&r->pg, line, epoch + 1, r->epochs, r->step, t);
	/* this rank's step, split: compute is what is neither data nor communication wait */
	struct rank_fig me = {
	    .step_ms = 1e3 * r->log.step_time / r->log.n,
	    .data_wait_ms = 1e3 * r->log.data_wait / r->log.n,
	    .comm_wait_ms = 1e3 * r->log.comm_wait / r->log.n,
	    .img_per_s = r->log.step_time > 0 ? (double)r->log.imgs / r->log.step_time : 0,
	    .device_mib = env->gpu >= 0 ? (double)be_cuda_peak_bytes(r->be) / (1 << 20) : 0,
	};
	me.compute_ms = fmax(0, me.step_ms - me.data_wait_ms - me.comm_wait_ms);
	metrics_line(&r->mt,
		     "{\"event\":\"train\",\"epoch\":%d,\"step\":%ld,"
		     "\"global_step\":%ld,\"loss\":%.9g,\"mean_loss\":%.9g,"
		     "\"rank0_loss\":%.9g,\"lr\":%.9g,\"img_per_s\":%.3f,"
		     "\"comm_wait_ms\":%.4f,\"data_wait_ms\":%.4f,"
		     "\"loss_scale\":%.9g,\"step_ms\":%.4f,\"compute_ms\":%.4f,\"eta_s\":%.1f}",
		     epoch + 1, s + 1, r->step, gl[0], gl[1], step_loss, lr, ips * env->world_size,
		     me.comm_wait_ms, me.data_wait_ms, step_scale, me.step_ms, me.compute_ms,
		     progress_eta(&r->pg, r->step, t));
	run_log_tb(r, gl[0], lr, ips * env->world_size, step_scale, &me);
	if (rankwatch_report(&r->rw, r->step, &me, &r->mt, &r->pg, err) < 0)
		return -1;
	run_ranks_tb(r);
	r->log.t = t;
	r->log.step_time = 0;
	r->log.imgs = 0;
	r->log.loss = 0;
	r->log.comm_wait = 0;
	r->log.data_wait = 0;
	r->log.n = 0;
	return 0;
}

/* A checkpoint at position at (the optimizer's state first fetched to the host). */
static int run_save(struct run *r, struct train_pos at, struct dp_error *err)
{
	at.loss_scale = r->sc.scale;
	at.scale_good = r->sc.good;
	at.skipped = r->sc.skipped;
	if (r->ox.ops->state_to_host(&r->ox, err) < 0)
		return errprefix(err, "checkpoint at step %ld: optimizer state", at.step);
	if (train_ckpt_save(&r->ck, &at, err) < 0)
		return -1;
	snprintf(r->res->last_checkpoint, sizeof(r->res->last_checkpoint), "%s/step-%ld",
		 r->ck.root, at.step);
	char abs[PATH_MAX], root[2 * PATH_MAX]; /* the path absolute, for whoever reads it */
	metrics_line(&r->mt,
		     "{\"event\":\"checkpoint\",\"global_step\":%ld,\"path\":\"%s/step-%ld\"}",
		     at.step,
		     metrics_json_str(root, sizeof(root),
				      r->mt.open && realpath(r->ck.root, abs) ? abs : r->ck.root),
		     at.step);
	return 0;
}

/* One step (accum micro-batches and the update) at step s of an epoch that runs steps
 * [s0, s0 + nsteps); then the stop vote and a checkpoint when one is due. 1: stopped on
 * request (after its checkpoint), 0: go on, -1: err. */
static int run_step(struct run *r, int epoch, long s, long s0, long nsteps, struct dp_error *err)
{
	const struct cfg_checkpoint *cc = &r->c->checkpoint;
	const struct train_env *env = r->env;
	double step_loss = 0, t_step = now_s();
	for (int micro = 0; micro < r->accum; micro++)
		if (run_micro(r, epoch, s, micro, &step_loss, err) < 0)
			return -1;
	if (r->ddp)
		r->log.comm_wait += ddp_last_wait(r->ddp);
	double lr = lr_at(&r->sched, r->step);
	double step_scale = r->sc.scale;
	if (run_update(r, lr, err) < 0)
		return -1;
	r->log.step_time += now_s() - t_step;
	r->step++;
	if (r->prof && r->be->ops->profile && (r->step == r->prof - 1 || r->step == r->prof) &&
	    r->be->ops->profile(r->be, r->step == r->prof - 1) < 0)
		return errprintf(err, "DPTRAIN_PROFILE_STEP: %s", r->be->err.text);
	step_loss /= r->accum;
	r->res->last_loss = step_loss;
	if (run_log(r, epoch, s, step_loss, lr, step_scale, err) < 0)
		return -1;
	/* a stop request (SIGTERM, SIGUSR1) on any rank stops every rank after this same step:
	 * the ranks' votes travelled with the gradients */
	float votes = env->stop && *env->stop ? 1.0f : 0.0f;
	if (r->ddp && ddp_votes(r->ddp, &votes, err) < 0)
		return -1;
	int stop = votes > 0;
	int epoch_end = s + 1 == s0 + nsteps || r->step == r->total;
	if (!stop && !(cc->every_steps > 0 && r->step % cc->every_steps == 0 && !epoch_end))
		return 0;
	if (run_save(
		r,
		position(&r->tr.s, r->step, epoch, s + 1 - s0, r->per_step, s + 1 == s0 + nsteps),
		err) < 0)
		return -1;
	if (!stop)
		return 0;
	int sig = env->stop ? *env->stop : 0; /* 0: another rank was asked */
	if (r->rank0) {
		progress_break(&r->pg);
		fprintf(r->out,
			"dptrain: stopping on request at step %ld; checkpoint %s/step-%ld\n",
			r->step, r->ck.root, r->step);
	}
	metrics_line(&r->mt, "{\"event\":\"stop\",\"global_step\":%ld,\"signal\":\"%s\"}", r->step,
		     sig == SIGTERM   ? "SIGTERM"
		     : sig == SIGUSR1 ? "SIGUSR1"
				      : "request");
	return 1;
}

/* Rank 0's report.html (output.report) from the metrics so far: after an evaluation, at the
 * end and at a stop; a failure is said once and training goes on. */
static void run_report(struct run *r)
{
	if (r->rank0 && r->mt.open && r->c->output.report)
		report_update(r->env->output_dir, r->c);
}

/* After an epoch's steps (s: where they ended): the evaluation when due, and the checkpoint
 * of the epoch's end or of the run's. */
static int run_epoch_end(struct run *r, int epoch, long s, long s0, long nsteps,
			 struct dp_error *err)
{
	const struct cfg *c = r->c;
	const struct cfg_checkpoint *cc = &c->checkpoint;
	struct train_result *res = r->res;
	res->epochs = epoch + 1;
	int last = epoch + 1 == r->epochs || r->step >= r->total;
	int due = c->train.eval_every > 0 && (epoch + 1) % c->train.eval_every == 0;
	if (r->ev.l && (due || last)) {
		double lsum;
		long corr, cnt;
		/* every rank evaluates its shard with rank 0's BatchNorm statistics, the ones
		 * saved with the weights */
		if (r->ddp && ddp_broadcast_buffers(r->ddp, err) < 0)
			return -1;
		if (evaluate(&r->m, &r->ev, &r->st, r->env->comm, &lsum, &corr, &cnt, err) < 0)
			return -1;
		res->eval_accuracy = cnt ? (double)corr / (double)cnt : 0;
		res->eval_loss = cnt ? lsum / (double)cnt : 0;
		if (r->rank0) {
			progress_break(&r->pg);
			fprintf(r->out, "epoch: %d eval: accuracy %.4f (%ld/%ld), loss %.6f\n",
				epoch + 1, res->eval_accuracy, corr, cnt, res->eval_loss);
			fflush(r->out);
		}
		metrics_line(&r->mt,
			     "{\"event\":\"eval\",\"epoch\":%d,\"global_step\":%ld,"
			     "\"accuracy\":%.9g,\"loss\":%.9g,\"correct\":%ld,\"count\":%ld}",
			     epoch + 1, r->step, res->eval_accuracy, res->eval_loss, corr, cnt);
		tb_scalars(&r->tb, r->step, 2, (const char *const[]){"eval/accuracy", "eval/loss"},
			   (const double[]){res->eval_accuracy, res->eval_loss});
		run_report(r);
	}
	/* at the end of the epoch, or of training (max_steps may end it mid-epoch) */
	int save = (cc->every_epochs > 0 && (epoch + 1) % cc->every_epochs == 0) ||
		   (cc->every_steps > 0 && r->step % cc->every_steps == 0) || last;
	if (save && r->ck.last_saved != r->step &&
	    run_save(r, position(&r->tr.s, r->step, epoch, s - s0, r->per_step, s == s0 + nsteps),
		     err) < 0)
		return -1;
	return 0;
}

/* The epochs, from the starting position to the last step. 1: stopped on request, 0: done,
 * -1: err. */
static int run_epochs(struct run *r, struct dp_error *err)
{
	for (int epoch = r->pos.epoch; epoch < r->epochs && r->step < r->total; epoch++) {
		size_t start = epoch == r->pos.epoch ? r->pos.offset : 0;
		if (loader_start_epoch(r->tr.l, epoch, start, err) < 0)
			return errprefix(err, "data.train");
		/* steps left in this epoch, and where it started (for the epoch's step numbers) */
		long nsteps = (long)loader_batches(r->tr.l) / r->accum;
		long s0 = (long)(start / (r->per_step * (size_t)r->env->world_size));
		long s;
		for (s = s0; s < s0 + nsteps && r->step < r->total; s++) {
			int stopped = run_step(r, epoch, s, s0, nsteps, err);
			if (stopped != 0)
				return stopped;
		}
		if (run_epoch_end(r, epoch, s, s0, nsteps, err) < 0)
			return -1;
	}
	return 0;
}

/* The end of a run that was not stopped: rank 0's final weights and the metrics' last line. */
static int run_finish(struct run *r, struct dp_error *err)
{
	struct train_result *res = r->res;
	if (r->env->gpu >= 0) {
		res->peak_device_bytes = be_cuda_peak_bytes(r->be);
		fprintf(r->out, "dptrain: GPU memory peak %.0f MiB\n",
			(double)res->peak_device_bytes / (1 << 20));
	}
	if (r->rank0 && r->env->output_dir) {
		char path[4096], meta[256];
		snprintf(path, sizeof(path), "%s/model.safetensors", r->env->output_dir);
		snprintf(meta, sizeof(meta),
			 "{\"format\":\"pt\",\"model\":\"%s\",\"step\":\"%ld\",\"producer\":"
			 "\"dptrain %s\"}",
			 r->m.name, r->step, DPTRAIN_VERSION);
		if (nn_save_weights(&r->m, path, meta, err) < 0)
			return -1;
	}
	metrics_line(&r->mt,
		     "{\"event\":\"end\",\"steps\":%ld,\"epochs\":%d,\"seconds\":%.3f,"
		     "\"eval_accuracy\":%.9g,\"peak_device_mib\":%.0f,\"skipped_steps\":%ld,"
		     "\"loss_scale\":%.9g}",
		     res->steps, res->epochs, res->seconds, res->eval_accuracy,
		     (double)res->peak_device_bytes / (1 << 20), r->sc.skipped, r->sc.scale);
	run_report(r);
	return 0;
}

/* Teardown; after a failure the other ranks stop too, told why. */
static void run_free(struct run *r, int failed, const struct dp_error *err)
{
	if (failed && r->env->comm) {
		struct dp_error why;
		errprintf(&why, "rank %d stopped: %s", r->env->rank, err->text);
		r->env->comm->ops->abort(r->env->comm, why.text);
	}
	ddp_destroy(r->ddp);
	rankwatch_close(&r->rw);
	metrics_close(&r->mt);
	tb_close(&r->tb);
	optim_exec_free(&r->ox);
	if (r->have_optim)
		optim_free(&r->o);
	stage_close(&r->st);
	split_free(&r->tr);
	split_free(&r->ev);
	if (r->have_model)
		nn_free(&r->m);
	if (r->be)
		r->be->ops->destroy(r->be);
}

int train_run(const struct cfg *c, const struct train_env *env, struct train_result *res,
	      struct dp_error *err)
{
	struct run r = {.c = c, .env = env, .res = res, .out = env->out ? env->out : stdout};
	int rv = -1, stopped;
	r.rank0 = env->rank == 0;
	if (env->output_dir && !realpath(env->output_dir, r.outdir))
		snprintf(r.outdir, sizeof(r.outdir), "%s", env->output_dir);
	if (r.rank0)
		progress_where(r.out, env->output_dir ? r.outdir : NULL, c->output.metrics);
	memset(res, 0, sizeof(*res));
	res->eval_accuracy = -1;
	res->resumed_at = -1;
	if (run_backend(&r, err) < 0 || run_model(&r, err) < 0 || run_ddp(&r, err) < 0 ||
	    run_data(&r, err) < 0 || run_optimizer(&r, err) < 0 || run_announce(&r, err) < 0)
		goto out;
	r.t0 = now_s();
	r.log.t = r.t0;
	r.step = r.pos.step;
	progress_init(&r.pg, r.out,
		      c->output.progress == CFG_PROGRESS_OFF	 ? PROGRESS_OFF
		      : c->output.progress == CFG_PROGRESS_LINES ? PROGRESS_LINES
								 : PROGRESS_AUTO,
		      r.rank0, r.step, r.total, r.t0);
	stopped = run_epochs(&r, err);
	progress_break(&r.pg);
	if (stopped < 0)
		goto out;
	res->steps = r.step;
	res->seconds = now_s() - r.t0;
	res->stopped = stopped;
	if (stopped)
		run_report(&r);
	if (!stopped && run_finish(&r, err) < 0)
		goto out;
	rv = 0;
out:
	run_free(&r, rv < 0, err);
	return rv;
}
