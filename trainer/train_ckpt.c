/* train_ckpt.c — the training loop's checkpoints: which files, what state.json's "state" says,
 * and moving both between rank 0 (which alone touches the files) and the other ranks. The
 * directory mechanics (atomic steps, checksums, latest, keep-K) are ckpt.c's. */
#define _GNU_SOURCE
#include "trainer/train_ckpt.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "trainer/ckpt/ckpt.h"
#include "common/error.h"
#include "common/warn.h"
#include "trainer/ckpt/safetensors.h"

void train_ckpt_init(struct train_ckpt *k, const struct cfg *c, const char *output_dir,
		     struct nn_model *m, struct optim *o, struct comm *comm, int rank,
		     int world_size, size_t train_samples)
{
	memset(k, 0, sizeof(*k));
	k->c = c;
	k->train_samples = train_samples;
	k->m = m;
	k->o = o;
	k->comm = comm;
	k->rank = rank;
	k->world_size = world_size;
	k->last_saved = -1;
	if (c->checkpoint.dir)
		snprintf(k->root, sizeof(k->root), "%s", c->checkpoint.dir);
	else
		snprintf(k->root, sizeof(k->root), "%s/checkpoints", output_dir ? output_dir : ".");
	/* What a checkpoint must agree on to be resumed: the model's shape and the optimizer's
	 * kind (its state buffers). World size, batch size, learning rate and epochs may
	 * change. */
	snprintf(k->fingerprint, sizeof(k->fingerprint),
		 "%s %dx%dx%d->%d, %zu parameters, optimizer %s", m->name, m->in_c, m->in_h,
		 m->in_w, m->classes, nn_param_count(m), optim_kind_name(o->p.kind));
}

/* crc32 of the parameter names and shapes: two models with the same count but another
 * layout differ. */
static unsigned long layout_hash(const struct nn_model *m)
{
	uLong h = crc32(0L, Z_NULL, 0);
	for (int i = 0; i < m->nparams; i++) {
		const struct nn_param *p = &m->params[i];
		h = crc32(h, (const Bytef *)p->name, (uInt)strlen(p->name));
		h = crc32(h, (const Bytef *)p->shape, (uInt)(sizeof(int) * (size_t)p->ndim));
	}
	return h;
}

/* ---- writing ---- */

struct optim_full {
	const char *name[OPTIM_MAX_STATE];
	float *data[OPTIM_MAX_STATE];
	int n;
	size_t total;
	long step;
	const char *kind;
};

static int write_model(void *ctx, const char *path, struct dp_error *err)
{
	struct train_ckpt *k = ctx;
	char meta[256];
	snprintf(meta, sizeof(meta),
		 "{\"format\":\"pt\",\"model\":\"%s\",\"producer\":\"dptrain %s\"}", k->m->name,
		 DPTRAIN_VERSION);
	return nn_save_weights(k->m, path, meta, err);
}

static int write_optim(void *ctx, const char *path, struct dp_error *err)
{
	const struct optim_full *f = ctx;
	struct st_entry e[OPTIM_MAX_STATE];
	int64_t shape[1] = {(int64_t)f->total};
	char meta[256];
	for (int i = 0; i < f->n; i++)
		e[i] = (struct st_entry){.name = f->name[i],
					 .dtype = "F32",
					 .ndim = 1,
					 .shape = shape,
					 .data = f->data[i],
					 .nbytes = f->total * sizeof(float)};
	snprintf(meta, sizeof(meta), "{\"optimizer\":\"%s\",\"step\":\"%ld\"}", f->kind, f->step);
	return st_write_atomic(path, e, f->n, meta, err);
}

/* The whole of every optimizer state buffer on every rank (ZeRO-1 shards are gathered). */
static int gather_optim(struct train_ckpt *k, struct optim_full *f, struct dp_error *err)
{
	int n;
	struct optim_state_buf *sb = optim_state(k->o, &n);
	memset(f, 0, sizeof(*f));
	f->n = n;
	f->total = k->m->param_total;
	f->step = k->o->step;
	f->kind = optim_kind_name(k->o->p.kind);
	for (int i = 0; i < n; i++) {
		f->name[i] = sb[i].name;
		if (!(f->data[i] = calloc(f->total ? f->total : 1, sizeof(float))))
			return errprintf(err, "out of memory for the optimizer state");
		memcpy(f->data[i] + sb[i].offset, sb[i].data, sb[i].count * sizeof(float));
		if (!k->comm || (sb[i].offset == 0 && sb[i].count == f->total))
			continue;
		/* the shards are train.c's comm_share split */
		if (comm_gather_shares(k->comm, f->data[i], f->total, err) < 0)
			return errprefix(err, "gathering the optimizer state");
	}
	return 0;
}

static void free_optim(struct optim_full *f)
{
	for (int i = 0; i < f->n; i++)
		free(f->data[i]);
}

/* Rank 0's status (rv: 0, or -1 with its message in err) to every rank: -1 on every rank
 * (the others' err says "rank 0: ..."), or 0. */
static int share_status(struct train_ckpt *k, int rv, struct dp_error *err)
{
	if (!k->comm)
		return rv;
	struct {
		char failed;
		struct dp_error msg;
	} s;
	memset(&s, 0, sizeof(s));
	s.failed = rv < 0;
	if (k->rank == 0 && rv < 0)
		s.msg = *err;
	if (k->comm->ops->broadcast(k->comm, &s, sizeof(s), 0, err) < 0)
		return errprefix(err, "checkpoint");
	if (s.failed && k->rank != 0)
		errprintf(err, "rank 0: %s", s.msg.text);
	return s.failed ? -1 : 0;
}

int train_ckpt_save(struct train_ckpt *k, const struct train_pos *pos, struct dp_error *err)
{
	struct optim_full f;
	int rv = gather_optim(k, &f, err);
	if (rv == 0 && k->rank == 0) {
		char state[2048];
		snprintf(state, sizeof(state),
			 "{\"step\":%ld,\"epoch\":%d,\"offset\":%zu,\"world_size\":%d,"
			 "\"batch_size\":%d,\"grad_accumulation_step\":%d,\"optimizer_step\":%ld,"
			 "\"config\":\"%s\",\"layout_crc32\":\"%08lx\",\"loss_scale\":%.17g,"
			 "\"loss_scale_good_steps\":%ld,\"skipped_steps\":%ld,"
			 "\"rng\":{\"kind\":\"counter\",\"seed\":%lld,\"data_seed\":%lld}}",
			 pos->step, pos->epoch, pos->offset, k->world_size, k->c->data.batch_size,
			 k->c->parallel.grad_accumulation_step, k->o->step, k->fingerprint,
			 layout_hash(k->m), pos->loss_scale > 0 ? pos->loss_scale : 1.0,
			 pos->scale_good, pos->skipped, (long long)k->c->seed,
			 (long long)k->c->data.seed);
		struct ckpt_file files[2] = {{"model.safetensors", write_model, k},
					     {"optim.safetensors", write_optim, &f}};
		rv = ckpt_write(k->root, pos->step, files, f.n > 0 ? 2 : 1, state,
				k->c->checkpoint.keep, err);
	}
	free_optim(&f);
	if (share_status(k, rv, err) < 0)
		return errprefix(err, "writing checkpoint step-%ld in %s", pos->step, k->root);
	k->last_saved = pos->step;
	return 0;
}

/* ---- reading ---- */

/* What rank 0 learned, sent to every rank as one block. */
struct resume_head {
	int32_t failed, found, epoch;
	int64_t step, optim_step, scale_good, skipped;
	int64_t seed, data_seed; /* the run's that wrote it; have_seeds: both were there */
	int32_t have_seeds;
	uint64_t offset;
	double loss_scale;
	char from[1024];
	struct dp_error msg; /* why it failed */
};

static int json_long(json_t *o, const char *key, long *v)
{
	json_t *x = json_object_get(o, key);
	if (!json_is_integer(x))
		return -1;
	*v = (long)json_integer_value(x);
	return 0;
}

/* A position this job can resume from: the numbers in trainer_state.json are checked like its
 * bytes, against what any run of this job can reach (a checkpoint from another world size or
 * batch size is fine: the sampler reshards). */
static int state_check(void *ctx, const char *state_json, struct dp_error *why)
{
	const struct train_ckpt *k = ctx;
	json_error_t je;
	json_t *st = json_loads(state_json, 0, &je);
	long step, epoch, offset, ostep, world, batch, accum;
	int rv = -1;
	if (!st || json_long(st, "step", &step) < 0 || json_long(st, "epoch", &epoch) < 0 ||
	    json_long(st, "offset", &offset) < 0 || json_long(st, "optimizer_step", &ostep) < 0 ||
	    json_long(st, "world_size", &world) < 0 || json_long(st, "batch_size", &batch) < 0 ||
	    !json_is_string(json_object_get(st, "config")) ||
	    !json_is_string(json_object_get(st, "layout_crc32"))) {
		errprintf(
		    why,
		    "lacks one of step, epoch, offset, optimizer_step, world_size, batch_size, "
		    "config, layout_crc32");
		goto out;
	}
	if (json_long(st, "grad_accumulation_step", &accum) < 0)
		accum = 1;
	/* every step takes at least one sample of the epoch's sequence, every finished epoch at
	 * least one step; the sequence has the data set's samples plus at most one per rank of
	 * padding */
	long n = (long)k->train_samples, seq = n + world;
	json_t *ls = json_object_get(st, "loss_scale");
	if (world < 1 || world > (1L << 24) || batch < 1 || batch > (1L << 30) || accum < 1 ||
	    accum > (1L << 20))
		errprintf(why,
			  "world_size %ld, batch_size %ld, grad_accumulation_step %ld: "
			  "not a job's",
			  world, batch, accum);
	else if (offset < 0 || offset > seq)
		errprintf(why, "offset %ld is not within an epoch of %ld samples (+%ld of padding)",
			  offset, n, world);
	else if (epoch < 0 || epoch > step || epoch > INT32_MAX)
		errprintf(why, "epoch %ld with step %ld: every finished epoch takes a step", epoch,
			  step);
	else if (step < 0 || step > (epoch + 1) * seq)
		errprintf(why, "step %ld cannot be reached in %ld epochs of %ld samples", step,
			  epoch + 1, n);
	else if (ostep < 0 || ostep > step)
		errprintf(why, "optimizer_step %ld is not within 0..step (%ld)", ostep, step);
	else if (ls && !json_is_number(ls))
		errprintf(why, "loss_scale is not a number");
	else if (ls && (!isfinite(json_number_value(ls)) || json_number_value(ls) <= 0))
		errprintf(why, "loss_scale %g is not a positive number", json_number_value(ls));
	else
		rv = 0;
out:
	json_decref(st);
	return rv;
}

/* Rank 0: find and check the checkpoint, load the weights, keep optim.safetensors open. */
static int resume_read(struct train_ckpt *k, struct resume_head *h, struct st_file *of,
		       int *have_of)
{
	const struct cfg_checkpoint *cc = &k->c->checkpoint;
	struct ckpt ck = {0};
	char warn[4096] = "";
	struct dp_error *why = &h->msg;
	int rv = -1;
	json_t *st = NULL;
	if (cc->resume == CFG_RESUME_PATH) {
		if (ckpt_open(&ck, cc->resume_path, why) < 0 ||
		    state_check(k, ck.state_json, why) < 0) {
			errprintf(why,
				  "checkpoint.resume %s: %s; give a valid checkpoint or \"auto\"",
				  cc->resume_path, why->text);
			ckpt_close(&ck);
			return -1;
		}
	} else {
		int found = ckpt_find_latest(k->root, state_check, k, &ck, warn, sizeof(warn), why);
		for (char *l = warn, *nl; *l; l = nl ? nl + 1 : l + strlen(l)) {
			nl = strchr(l, '\n');
			dp_warn("dptrain", NULL, "%.*s", nl ? (int)(nl - l) : (int)strlen(l), l);
		}
		if (found < 0)
			return -1;
		if (found == 0)
			return 0;
	}
	json_error_t je;
	st = json_loads(ck.state_json, 0, &je);
	long step, epoch, offset, ostep;
	const char *conf = json_string_value(json_object_get(st, "config"));
	const char *lay = json_string_value(json_object_get(st, "layout_crc32"));
	char ours[16];
	snprintf(ours, sizeof(ours), "%08lx", layout_hash(k->m));
	if (!st || json_long(st, "step", &step) < 0 || json_long(st, "epoch", &epoch) < 0 ||
	    json_long(st, "offset", &offset) < 0 || json_long(st, "optimizer_step", &ostep) < 0 ||
	    !conf || !lay || step < 0 || epoch < 0 || offset < 0) {
		errprintf(why, "%s: state.json lacks step/epoch/offset/config", ck.path);
		goto out;
	}
	if (strcmp(conf, k->fingerprint) != 0 || strcmp(lay, ours) != 0) {
		errprintf(
		    why,
		    "%s was written for %s; this job trains %s: point checkpoint.dir elsewhere "
		    "or set checkpoint.resume to \"never\"",
		    ck.path, conf, k->fingerprint);
		goto out;
	}
	char p[CKPT_PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/model.safetensors", ck.path);
	if (nn_load_weights(k->m, p, why) < 0)
		goto out;
	int n;
	optim_state(k->o, &n);
	if (n > 0) {
		snprintf(p, sizeof(p), "%s/optim.safetensors", ck.path);
		if (st_open(of, p, why) < 0)
			goto out;
		*have_of = 1;
	}
	h->found = 1;
	h->step = step;
	h->epoch = (int32_t)epoch;
	h->offset = (uint64_t)offset;
	h->optim_step = ostep;
	/* written by every version; the good-step count only since dynamic scaling exists */
	json_t *ls = json_object_get(st, "loss_scale");
	h->loss_scale = json_is_number(ls) && json_number_value(ls) > 0 ? json_number_value(ls) : 1;
	long good = 0;
	h->scale_good = json_long(st, "loss_scale_good_steps", &good) == 0 && good > 0 ? good : 0;
	long skipped = 0; /* since the count is carried across resumes */
	h->skipped = json_long(st, "skipped_steps", &skipped) == 0 && skipped > 0 ? skipped : 0;
	json_t *rng = json_object_get(st, "rng");
	json_t *sd = json_object_get(rng, "seed"), *dsd = json_object_get(rng, "data_seed");
	h->have_seeds = json_is_integer(sd) && json_is_integer(dsd);
	h->seed = h->have_seeds ? (int64_t)json_integer_value(sd) : 0;
	h->data_seed = h->have_seeds ? (int64_t)json_integer_value(dsd) : 0;
	snprintf(h->from, sizeof(h->from), "%.1000s", ck.path);
	rv = 0;
out:
	json_decref(st);
	ckpt_close(&ck);
	return rv;
}

int train_ckpt_resume(struct train_ckpt *k, struct train_pos *pos, char *from, size_t fromlen,
		      struct dp_error *err)
{
	struct resume_head *h = calloc(1, sizeof(*h));
	struct st_file of;
	int have_of = 0, rv = -1;
	float *full = NULL;
	memset(&of, 0, sizeof(of));
	if (!h)
		return errprintf(err, "out of memory");
	if (k->c->checkpoint.resume == CFG_RESUME_NEVER) {
		free(h);
		return 0;
	}
	if (k->rank == 0)
		h->failed = resume_read(k, h, &of, &have_of) < 0;
	if (k->comm && k->comm->ops->broadcast(k->comm, h, sizeof(*h), 0, err) < 0) {
		errprefix(err, "resuming");
		goto out;
	}
	if (h->failed) {
		errprintf(err, "%s%s", k->rank ? "rank 0: " : "", h->msg.text);
		goto out;
	}
	if (!h->found) {
		rv = 0;
		goto out;
	}
	/* the optimizer state: rank 0 sends each whole buffer, every rank keeps its shard */
	int n;
	struct optim_state_buf *sb = optim_state(k->o, &n);
	size_t total = k->m->param_total;
	if (n > 0 && !(full = calloc(total ? total : 1, sizeof(float)))) {
		errprintf(err, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		int bad = 0;
		if (k->rank == 0) {
			const struct st_tensor *t = st_find(&of, sb[i].name);
			if (!t || strcmp(t->dtype, "F32") != 0 || t->end - t->begin != total * 4)
				bad = 1;
			else
				memcpy(full, st_data(&of, t), total * sizeof(float));
		}
		if (k->comm &&
		    (k->comm->ops->broadcast(k->comm, &bad, sizeof(bad), 0, err) < 0 ||
		     k->comm->ops->broadcast(k->comm, full, total * sizeof(float), 0, err) < 0)) {
			errprefix(err, "resuming");
			goto out;
		}
		if (bad) {
			errprintf(err,
				  "%s/optim.safetensors: no F32 tensor \"%s\" of %zu floats; the "
				  "checkpoint does not fit this optimizer",
				  h->from, sb[i].name, total);
			goto out;
		}
		memcpy(sb[i].data, full + sb[i].offset, sb[i].count * sizeof(float));
	}
	k->o->step = h->optim_step;
	pos->step = h->step;
	pos->epoch = h->epoch;
	pos->offset = h->offset;
	pos->loss_scale = h->loss_scale;
	pos->scale_good = h->scale_good;
	pos->skipped = h->skipped;
	snprintf(from, fromlen, "%s", h->from);
	/* another seed: the run goes on, but not as the one that wrote the checkpoint would have */
	if (k->rank == 0 && h->have_seeds &&
	    (h->seed != (int64_t)k->c->seed || h->data_seed != (int64_t)k->c->data.seed))
		fprintf(stderr,
			"dptrain: warning: %s was written by a run with seed %lld and data.seed "
			"%lld, this one has %lld and %lld: from here on the data order and "
			"augmentation differ from an uninterrupted run's\n",
			h->from, (long long)h->seed, (long long)h->data_seed, (long long)k->c->seed,
			(long long)k->c->data.seed);
	k->last_saved = h->step;
	rv = 1;
out:
	if (have_of)
		st_close(&of);
	free(full);
	free(h);
	return rv;
}
