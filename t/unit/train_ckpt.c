/* train_ckpt.c (test) — trainer/train_ckpt.c: what a checkpoint holds (trainer_state.json's keys,
 * types and values: position, world size, loss scale, RNG seeds, the config's fingerprint and
 * the layout's CRC; the weights; the whole optimizer state), read back identical into a model
 * and optimizer that had changed; the newest valid checkpoint chosen; what a job may change
 * (world size, batch size) and what it may not (the model, its layout, the optimizer), each
 * refusal naming the checkpoint and why; damaged, truncated and out-of-range states refused
 * with checkpoint.resume naming the file, skipped with a warning with auto; a failed write; and
 * on two forked ranks (store and CPU ring on 127.0.0.1) ZeRO-1's sharded optimizer state saved
 * whole and handed back shard by shard, rank 0's failures reaching rank 1. Everything happens
 * under a mkdtemp directory in /tmp, removed at the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/error.h"
#include "config/config.h"
#include "store/store.h"
#include "trainer/backend/backend.h"
#include "trainer/ckpt/safetensors.h"
#include "trainer/dist/comm.h"
#include "trainer/nn/nn.h"
#include "trainer/optim/optim.h"
#include "trainer/train_ckpt.h"
#include "t/lib/ranks.h"
#include "t/lib/tap.h"

#define SAMPLES 64 /* data.train.size: what a resumed position is checked against */

static char tmp[] = "/tmp/dptrain-train-ckpt-XXXXXX";

/* ---------------------------------------------------------------------------------------
 * A job: config, model and optimizer, mapped as train.c maps them. */

struct job {
	struct cfg c;
	struct backend *be;
	struct nn_model m;
	struct optim o;
	int have_m, have_o;
};

/* hidden: the mlp's widths as JSON; opt: the optimizer object; dir: checkpoint.dir */
static int job_make(struct job *j, const char *hidden, const char *opt, const char *dir, size_t lo,
		    size_t hi_or_0, struct dp_error *err)
{
	char json[2048];
	memset(j, 0, sizeof(*j));
	snprintf(json, sizeof(json),
		 "{\"seed\": 11, \"model\": {\"name\": \"mlp\", \"num_classes\": 3, "
		 "\"input_shape\": [1, 4, 4], \"hidden\": %s}, "
		 "\"data\": {\"format\": \"synthetic\", \"train\": {\"size\": %d}, "
		 "\"batch_size\": 4, \"seed\": 5}, \"optimizer\": %s, "
		 "\"checkpoint\": {\"dir\": \"%s\", \"keep\": 5}}",
		 hidden, SAMPLES, opt, dir);
	if (cfg_parse(&j->c, json, strlen(json), "train-ckpt.json", 0, NULL, err) < 0)
		return -1;
	if (!(j->be = be_ref_create(err)))
		return -1;
	const struct cfg *c = &j->c;
	struct nn_spec spec = {.name = "mlp",
			       .c = c->model.input_shape[0],
			       .h = c->model.input_shape[1],
			       .w = c->model.input_shape[2],
			       .classes = c->model.num_classes,
			       .hidden = c->model.hidden.v,
			       .nhidden = c->model.hidden.n};
	if (nn_build(&j->m, j->be, &spec, err) < 0)
		return -1;
	j->have_m = 1;
	if (nn_init_weights(&j->m, (uint64_t)c->seed, err) < 0)
		return -1;

	struct optim_params p;
	enum optim_kind kind = c->optimizer.name == CFG_OPT_ADAMW  ? OPTIM_ADAMW
			       : c->optimizer.name == CFG_OPT_LAMB ? OPTIM_LAMB
								   : OPTIM_SGD;
	optim_params_default(&p, kind);
	p.weight_decay = c->optimizer.weight_decay;
	p.momentum = c->optimizer.momentum;
	p.beta1 = c->optimizer.betas[0];
	p.beta2 = c->optimizer.betas[1];
	p.eps = c->optimizer.eps;
	struct optim_segment segs[16];
	if (j->m.nparams > 16)
		return errprintf(err, "%d parameters: more than the test's 16", j->m.nparams);
	for (int i = 0; i < j->m.nparams; i++)
		segs[i] = (struct optim_segment){.name = j->m.params[i].name,
						 .offset = j->m.params[i].offset,
						 .count = j->m.params[i].count,
						 .decay = p.weight_decay != 0};
	size_t hi = hi_or_0 ? hi_or_0 : j->m.param_total;
	if (optim_init_shard(&j->o, &p, segs, j->m.nparams, j->m.param_total, lo, hi, err) < 0)
		return -1;
	j->have_o = 1;
	return 0;
}

static void job_free(struct job *j)
{
	if (j->have_o)
		optim_free(&j->o);
	if (j->have_m)
		nn_free(&j->m);
	if (j->be)
		j->be->ops->destroy(j->be);
	cfg_free(&j->c);
	memset(j, 0, sizeof(*j));
}

/* A few optimizer steps on fixed gradients: state and step count that are not zero. */
static void job_train(struct job *j, int steps)
{
	for (int s = 0; s < steps; s++) {
		for (size_t i = 0; i < j->m.param_total; i++)
			j->m.grads[i] = (float)sin(0.37 * (double)i + s) * 0.1f;
		optim_step(&j->o, j->m.weights, j->m.grads, 1e-2);
	}
}

/* What resuming must bring back. */
struct snap {
	float *w;
	float *state[OPTIM_MAX_STATE];
	long step;
};

static void snap_take(struct snap *s, const struct job *j)
{
	s->w = malloc(j->m.param_total * sizeof(float));
	memcpy(s->w, j->m.weights, j->m.param_total * sizeof(float));
	for (int k = 0; k < j->o.nstate; k++) {
		s->state[k] = malloc(j->o.state[k].count * sizeof(float));
		memcpy(s->state[k], j->o.state[k].data, j->o.state[k].count * sizeof(float));
	}
	s->step = j->o.step;
}

/* Every parameter's weights and every state buffer equal to the bit. */
static int snap_same(const struct snap *s, const struct job *j, int weights)
{
	for (int i = 0; weights && i < j->m.nparams; i++) {
		const struct nn_param *p = &j->m.params[i];
		if (memcmp(s->w + p->offset, j->m.weights + p->offset, p->count * sizeof(float)))
			return 0;
	}
	for (int k = 0; k < j->o.nstate; k++)
		if (memcmp(s->state[k], j->o.state[k].data, j->o.state[k].count * sizeof(float)))
			return 0;
	return s->step == j->o.step;
}

static void snap_restore(const struct snap *s, struct job *j)
{
	memcpy(j->m.weights, s->w, j->m.param_total * sizeof(float));
	for (int k = 0; k < j->o.nstate; k++)
		memcpy(j->o.state[k].data, s->state[k], j->o.state[k].count * sizeof(float));
	j->o.step = s->step;
}

static void snap_free(struct snap *s)
{
	free(s->w);
	for (int k = 0; k < OPTIM_MAX_STATE; k++)
		free(s->state[k]);
	memset(s, 0, sizeof(*s));
}

/* What a crash or another job leaves in memory before a resume. */
static void job_scramble(struct job *j)
{
	for (size_t i = 0; i < j->m.param_total; i++)
		j->m.weights[i] = -3.0f;
	for (int k = 0; k < j->o.nstate; k++)
		for (size_t i = 0; i < j->o.state[k].count; i++)
			j->o.state[k].data[i] = 7.0f;
	j->o.step = 99;
}

/* ---------------------------------------------------------------------------------------
 * Files. */

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0, got;
	if (!f)
		return NULL;
	do {
		if (n + 4096 + 1 > cap) {
			char *g = realloc(buf, cap = cap * 2 + 8192);
			if (!g) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = g;
		}
		got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
	} while (got > 0);
	fclose(f);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

static int spit(const char *path, const char *text, size_t len)
{
	FILE *f = fopen(path, "wb");
	int rv = f && fwrite(text, 1, len, f) == len ? 0 : -1;
	if (f && fclose(f) != 0)
		rv = -1;
	return rv;
}

static json_t *load_json(const char *path)
{
	json_error_t je;
	return json_load_file(path, 0, &je);
}

/* Replaces step_dir's trainer_state.json by text and fixes its size and CRC in state.json: an
 * intact checkpoint that says what text says. */
static int forge(const char *step_dir, const char *text)
{
	char path[600];
	size_t len = strlen(text);
	snprintf(path, sizeof(path), "%s/trainer_state.json", step_dir);
	if (spit(path, text, len) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/state.json", step_dir);
	json_t *doc = load_json(path);
	json_t *e = json_object_get(json_object_get(doc, "files"), "trainer_state.json");
	if (!e) {
		json_decref(doc);
		return -1;
	}
	json_object_set_new(e, "bytes", json_integer((json_int_t)len));
	json_object_set_new(e, "crc32",
			    json_integer((json_int_t)crc32(0, (const Bytef *)text, (uInt)len)));
	int rv = json_dump_file(doc, path, JSON_COMPACT);
	json_decref(doc);
	return rv;
}

/* The trainer state of step_dir with key set to the JSON value (NULL: removed), as text. */
static char *state_with(const char *step_dir, const char *key, const char *value)
{
	char path[600];
	json_error_t je;
	snprintf(path, sizeof(path), "%s/trainer_state.json", step_dir);
	json_t *st = load_json(path);
	if (!st)
		return NULL;
	if (value)
		json_object_set_new(st, key, json_loads(value, JSON_DECODE_ANY, &je));
	else
		json_object_del(st, key);
	char *text = json_dumps(st, JSON_COMPACT);
	json_decref(st);
	return text;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* stderr into a file while a call runs (auto's warnings). */
static int err_fd = -1;
static char err_path[600];

static void stderr_catch(void)
{
	int fd;
	snprintf(err_path, sizeof(err_path), "%s/stderr", tmp);
	fflush(stderr);
	err_fd = dup(2);
	fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (err_fd < 0 || fd < 0 || dup2(fd, 2) < 0)
		bail_out("redirecting stderr: %s", strerror(errno));
	close(fd);
}

static char *stderr_release(void)
{
	fflush(stderr);
	dup2(err_fd, 2);
	close(err_fd);
	err_fd = -1;
	char *text = slurp(err_path, NULL);
	return text ? text : strdup("");
}

/* ---------------------------------------------------------------------------------------
 * One rank. */

static struct job job;
static char ckdir[300];
#define ADAMW  "{\"name\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.01}"
#define HIDDEN "[8]"

static int resume(struct job *j, struct train_pos *pos, char *from, size_t fromlen,
		  enum cfg_resume how, const char *path, struct dp_error *err)
{
	struct train_ckpt k;
	char *saved_path = j->c.checkpoint.resume_path;
	enum cfg_resume saved = j->c.checkpoint.resume;
	j->c.checkpoint.resume = how;
	j->c.checkpoint.resume_path = (char *)path;
	train_ckpt_init(&k, &j->c, tmp, &j->m, &j->o, NULL, 0, 1, SAMPLES);
	int rv = train_ckpt_resume(&k, pos, from, fromlen, err);
	j->c.checkpoint.resume = saved;
	j->c.checkpoint.resume_path = saved_path;
	return rv;
}

static int save(struct job *j, struct train_pos pos, struct dp_error *err)
{
	struct train_ckpt k;
	train_ckpt_init(&k, &j->c, tmp, &j->m, &j->o, NULL, 0, 1, SAMPLES);
	return train_ckpt_save(&k, &pos, err);
}

static void test_init(void)
{
	struct train_ckpt k;
	char want[600];

	train_ckpt_init(&k, &job.c, tmp, &job.m, &job.o, NULL, 0, 1, SAMPLES);
	is(k.root, ckdir, "the checkpoint directory is checkpoint.dir");
	snprintf(want, sizeof(want), "mlp 1x4x4->3, %zu parameters, optimizer adamw",
		 nn_param_count(&job.m));
	is(k.fingerprint, want, "the fingerprint: model, input, classes, parameters, optimizer");
	ok(k.last_saved == -1, "nothing saved yet");
	char *dir = job.c.checkpoint.dir;
	job.c.checkpoint.dir = NULL;
	train_ckpt_init(&k, &job.c, "/some/out", &job.m, &job.o, NULL, 0, 1, SAMPLES);
	is(k.root, "/some/out/checkpoints", "without checkpoint.dir: <output dir>/checkpoints");
	job.c.checkpoint.dir = dir;
}

static void test_round_trip(void)
{
	struct dp_error err = {0};
	struct train_pos pos = {.step = 7,
				.epoch = 1,
				.offset = 12,
				.loss_scale = 0.1 * 3, /* no short decimal: %.17g must carry it */
				.scale_good = 3,
				.skipped = 2},
			 got = {-1, -1, 1, -1, -1, -1};
	char from[1024] = "", path[600], want[600];
	struct snap s;

	ok(resume(&job, &got, from, sizeof(from), CFG_RESUME_AUTO, NULL, &err) == 0 &&
	       got.step == -1,
	   "auto with no checkpoint yet: a fresh start, nothing set: %s", err.text);

	snap_take(&s, &job);
	ok(save(&job, pos, &err) == 0, "saved at step 7: %s", err.text);
	const char *names[] = {"model.safetensors", "optim.safetensors", "trainer_state.json",
			       "state.json"};
	int all = 1;
	for (int i = 0; i < 4; i++) {
		struct stat st;
		snprintf(path, sizeof(path), "%s/step-7/%s", ckdir, names[i]);
		all &= stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
	}
	ok(all, "step-7 holds the weights, the optimizer state, the trainer state and state.json");

	/* trainer_state.json */
	snprintf(path, sizeof(path), "%s/step-7/trainer_state.json", ckdir);
	json_t *st = load_json(path), *rng = json_object_get(st, "rng");
	ok(json_is_object(st) && json_object_size(st) == 13,
	   "trainer_state.json: an object of 13 keys (%zu)", json_object_size(st));
	const char *ints[] = {"step",		"epoch",
			      "offset",		"world_size",
			      "batch_size",	"grad_accumulation_step",
			      "optimizer_step", "loss_scale_good_steps",
			      "skipped_steps"};
	const long vals[] = {7, 1, 12, 1, 4, 1, 3, 3, 2};
	int good = 1;
	for (int i = 0; i < 9; i++) {
		json_t *v = json_object_get(st, ints[i]);
		if (!json_is_integer(v) || json_integer_value(v) != vals[i]) {
			diag("%s: not the integer %ld", ints[i], vals[i]);
			good = 0;
		}
	}
	ok(good, "step 7, epoch 1, offset 12, world_size 1, batch_size 4, "
		 "grad_accumulation_step 1, optimizer_step 3, loss_scale_good_steps 3, "
		 "skipped_steps 2");
	json_t *ls = json_object_get(st, "loss_scale");
	ok(json_is_real(ls) && json_real_value(ls) == 0.1 * 3,
	   "loss_scale: the number, to the bit (%.17g)", json_number_value(ls));
	struct train_ckpt k;
	train_ckpt_init(&k, &job.c, tmp, &job.m, &job.o, NULL, 0, 1, SAMPLES);
	is(json_string_value(json_object_get(st, "config")), k.fingerprint,
	   "config: the fingerprint");
	const char *crc = json_string_value(json_object_get(st, "layout_crc32"));
	ok(crc && strlen(crc) == 8 && strspn(crc, "0123456789abcdef") == 8,
	   "layout_crc32: 8 hex digits (%s)", crc ? crc : "none");
	const char *kind = json_string_value(json_object_get(rng, "kind"));
	ok(json_is_object(rng) && kind && !strcmp(kind, "counter") &&
	       json_integer_value(json_object_get(rng, "seed")) == 11 &&
	       json_integer_value(json_object_get(rng, "data_seed")) == 5,
	   "rng: counter-based, seed 11, data_seed 5");
	json_decref(st);

	/* optim.safetensors: every state buffer whole, F32, and the step */
	struct st_file of;
	snprintf(path, sizeof(path), "%s/step-7/optim.safetensors", ckdir);
	if (st_open(&of, path, &err) == 0) {
		int same = of.n == job.o.nstate;
		for (int k2 = 0; k2 < job.o.nstate; k2++) {
			const struct st_tensor *t = st_find(&of, job.o.state[k2].name);
			same &= t && !strcmp(t->dtype, "F32") &&
				t->end - t->begin == job.m.param_total * sizeof(float) &&
				!memcmp(st_data(&of, t), job.o.state[k2].data,
					job.m.param_total * sizeof(float));
		}
		ok(same && job.o.nstate == 2,
		   "optim.safetensors: exp_avg and exp_avg_sq, as they are");
		like(of.metadata ? of.metadata : "", "\"step\":\"3\"",
		     "and the optimizer's step count");
		st_close(&of);
	} else {
		fail("optim.safetensors: %s", err.text);
		skip(1, "no optim.safetensors");
	}

	/* back into a model and optimizer that have changed since */
	job_scramble(&job);
	ok(resume(&job, &got, from, sizeof(from), CFG_RESUME_AUTO, NULL, &err) == 1,
	   "auto resumes: %s", err.text);
	ok(got.step == 7 && got.epoch == 1 && got.offset == 12 && got.loss_scale == 0.1 * 3 &&
	       got.scale_good == 3 && got.skipped == 2,
	   "the position: step, epoch, offset, loss scale (to the bit), good and skipped steps");
	snprintf(want, sizeof(want), "%s/step-7", ckdir);
	is(from, want, "from names the step directory");
	ok(snap_same(&s, &job, 1), "weights, optimizer state and step count identical to the bit");

	job_scramble(&job);
	got = (struct train_pos){-1, -1, 1, -1, -1, -1};
	ok(resume(&job, &got, from, sizeof(from), CFG_RESUME_NEVER, NULL, &err) == 0 &&
	       got.step == -1 && job.o.step == 99,
	   "never: nothing read, nothing set");
	ok(resume(&job, &got, from, sizeof(from), CFG_RESUME_PATH, want, &err) == 1 &&
	       got.step == 7 && snap_same(&s, &job, 1),
	   "a path: the same, from there: %s", err.text);
	snap_free(&s);

	/* a scale of 0 (no scaling) is saved as 1; the newest step is the one resumed */
	job_train(&job, 1);
	pos = (struct train_pos){.step = 9, .epoch = 1, .offset = 20, .loss_scale = 0};
	snap_take(&s, &job);
	ok(save(&job, pos, &err) == 0, "saved at step 9: %s", err.text);
	job_scramble(&job);
	ok(resume(&job, &got, from, sizeof(from), CFG_RESUME_AUTO, NULL, &err) == 1 &&
	       got.step == 9 && got.loss_scale == 1 && got.scale_good == 0 &&
	       snap_same(&s, &job, 1),
	   "auto takes the newest, step 9; its loss scale 0 was saved as 1");
	snap_free(&s);
}

/* A step written by this job, then damaged. */
static void test_damaged(void)
{
	struct dp_error err = {0};
	struct train_pos got;
	char from[1024], step9[600], path[700], want[2048], *text, *warn;
	size_t len;

	/* the weights of step 9 cut short */
	snprintf(step9, sizeof(step9), "%s/step-9", ckdir);
	snprintf(path, sizeof(path), "%s/model.safetensors", step9);
	text = slurp(path, &len);
	if (!text || len < 16)
		bail_out("%s: cannot read", path);
	spit(path, text, len - 8);
	stderr_catch();
	int rv = resume(&job, &got, from, sizeof(from), CFG_RESUME_AUTO, NULL, &err);
	warn = stderr_release();
	ok(rv == 1 && got.step == 7, "auto: a truncated step 9 is passed over for step 7 (%d)", rv);
	snprintf(want, sizeof(want),
		 "%s: model.safetensors: %zu bytes, state.json says %zu (truncated?)", step9,
		 len - 8, len);
	like(warn, want, "with a warning naming the file and what is wrong");
	like(warn, "dptrain: warning: ", "on stderr, as dptrain's");
	free(warn);
	rv = resume(&job, &got, from, sizeof(from), CFG_RESUME_PATH, step9, &err);
	snprintf(want, sizeof(want), "checkpoint.resume %s: %s: model.safetensors: %zu bytes",
		 step9, step9, len - 8);
	ok(rv == -1, "checkpoint.resume naming the truncated step: -1");
	like(err.text, want, "naming the key, the file and its size");
	like(err.text, "give a valid checkpoint or \"auto\"", "and what to do");

	/* the same size, one byte changed */
	text[len / 2] ^= 0x40;
	spit(path, text, len);
	rv = resume(&job, &got, from, sizeof(from), CFG_RESUME_PATH, step9, &err);
	ok(rv == -1 && strstr(err.text, "model.safetensors: crc32 mismatch (corrupt)"),
	   "a changed byte: refused, naming the file: %s", err.text);
	text[len / 2] ^= 0x40;
	spit(path, text, len);
	free(text);

	/* the trainer state cut short */
	snprintf(path, sizeof(path), "%s/trainer_state.json", step9);
	text = slurp(path, &len);
	spit(path, text, len / 2);
	stderr_catch();
	rv = resume(&job, &got, from, sizeof(from), CFG_RESUME_AUTO, NULL, &err);
	warn = stderr_release();
	ok(rv == 1 && got.step == 7,
	   "auto: step 9 with its trainer state cut short is passed over");
	like(warn, "step-9: trainer_state.json", "the warning names the trainer state");
	free(warn);
	rv = resume(&job, &got, from, sizeof(from), CFG_RESUME_PATH, step9, &err);
	ok(rv == -1 && strstr(err.text, "step-9: trainer_state.json"),
	   "checkpoint.resume names it too: %s", err.text);
	spit(path, text, len);
	free(text);

	/* nothing valid at all */
	snprintf(path, sizeof(path), "%s/step-7/trainer_state.json", ckdir);
	text = slurp(path, &len);
	spit(path, "{}", 2);
	snprintf(path, sizeof(path), "%s/step-9/trainer_state.json", ckdir);
	char *text9 = slurp(path, &len);
	spit(path, "{}", 2);
	stderr_catch();
	rv = resume(&job, &got, from, sizeof(from), CFG_RESUME_AUTO, NULL, &err);
	warn = stderr_release();
	ok(rv == 0, "auto with every step damaged: a fresh start (%d)", rv);
	ok(strstr(warn, "step-7") && strstr(warn, "step-9"), "with a warning for each");
	free(warn);
	spit(path, text9, strlen(text9));
	snprintf(path, sizeof(path), "%s/step-7/trainer_state.json", ckdir);
	spit(path, text, strlen(text));
	free(text);
	free(text9);
}

/* Intact checkpoints (sizes and CRCs agree) whose trainer state says something else. */
struct forged {
	const char *key, *value; /* value NULL: the key removed */
	const char *whole;	 /* instead: the whole file */
	const char *why;	 /* NULL: accepted */
};

static const struct forged forgeries[] = {
    {"world_size", "4", NULL, NULL},
    {"batch_size", "32", NULL, NULL},
    {"grad_accumulation_step", "2", NULL, NULL},
    {"offset", NULL, NULL,
     "lacks one of step, epoch, offset, optimizer_step, world_size, batch_size, config, "
     "layout_crc32"},
    {"step", "\"11\"", NULL, "lacks one of step, epoch,"},
    {"offset", "1000", NULL, "offset 1000 is not within an epoch of 64 samples (+1 of padding)"},
    {"epoch", "12", NULL, "epoch 12 with step 11: every finished epoch takes a step"},
    {"step", "1000", NULL, "step 1000 cannot be reached in 2 epochs of 64 samples"},
    {"optimizer_step", "12", NULL, "optimizer_step 12 is not within 0..step (11)"},
    {"world_size", "0", NULL, "world_size 0, batch_size 4, grad_accumulation_step 1: not a job's"},
    {"loss_scale", "\"big\"", NULL, "loss_scale is not a number"},
    {"loss_scale", "0", NULL, "loss_scale 0 is not a positive number"},
    {"loss_scale", "-2.5", NULL, "loss_scale -2.5 is not a positive number"},
    {NULL, NULL, "[]", "trainer_state.json: not a JSON object"},
    {NULL, NULL, "{\"step\": 11,", "trainer_state.json: not a JSON object"},
};

static void test_forged(void)
{
	struct dp_error err = {0};
	struct train_pos got, pos = {.step = 11, .epoch = 1, .offset = 20, .loss_scale = 8};
	char from[1024], step11[600], want[900];
	struct snap s;

	snprintf(step11, sizeof(step11), "%s/step-11", ckdir);
	for (size_t i = 0; i < sizeof(forgeries) / sizeof(*forgeries); i++) {
		const struct forged *f = &forgeries[i];
		char what[128];
		if (f->whole)
			snprintf(what, sizeof(what), "trainer_state.json %s", f->whole);
		else
			snprintf(what, sizeof(what), "%s %s", f->key,
				 f->value ? f->value : "missing");
		snap_take(&s, &job);
		char *text = NULL;
		if (save(&job, pos, &err) < 0 ||
		    !(text = f->whole ? strdup(f->whole) : state_with(step11, f->key, f->value)) ||
		    forge(step11, text) < 0)
			bail_out("forging %s: %s", what, err.text);
		free(text);
		job_scramble(&job);
		int rv = resume(&job, &got, from, sizeof(from), CFG_RESUME_PATH, step11, &err);
		if (!f->why) {
			ok(rv == 1 && got.step == 11 && snap_same(&s, &job, 1),
			   "%s: may change; resumed (%s)", what, err.text);
		} else {
			snprintf(want, sizeof(want), "checkpoint.resume %s: ", step11);
			ok(rv == -1 && strstr(err.text, want) && strstr(err.text, f->why) &&
			       strstr(err.text, "; give a valid checkpoint or \"auto\""),
			   "%s: refused, naming the checkpoint and why", what);
			if (rv != -1 || !strstr(err.text, f->why))
				diag("got %d: %s", rv, err.text);
		}
		snap_restore(&s, &job);
		snap_free(&s);
	}

	/* auto passes over a step whose state is out of range, with a warning */
	char *text = NULL;
	if (save(&job, pos, &err) < 0 || !(text = state_with(step11, "offset", "1000")) ||
	    forge(step11, text) < 0)
		bail_out("forging: %s", err.text);
	free(text);
	stderr_catch();
	int rv = resume(&job, &got, from, sizeof(from), CFG_RESUME_AUTO, NULL, &err);
	char *warn = stderr_release();
	ok(rv == 1 && got.step == 9, "auto passes over the forged step 11 for step 9 (%d %ld)", rv,
	   got.step);
	like(warn, "step-11", "with a warning naming it");
	like(warn, "offset 1000 is not within an epoch", "and why");
	free(warn);
	nftw(step11, rm_one, 4, FTW_DEPTH | FTW_PHYS);
}

/* The checkpoint of another model or optimizer: refused, with auto too. */
static void test_other_job(void)
{
	struct dp_error err = {0};
	struct train_pos got;
	char from[1024], theirs[512], want[2048];
	struct train_ckpt k;
	struct job other;

	train_ckpt_init(&k, &job.c, tmp, &job.m, &job.o, NULL, 0, 1, SAMPLES);
	snprintf(theirs, sizeof(theirs), "%s", k.fingerprint);
	struct {
		const char *hidden, *opt, *what;
	} others[] = {
	    {"[6]", ADAMW, "another model (hidden [6])"},
	    {HIDDEN, "{\"name\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9}", "another optimizer"},
	    /* the same number of parameters in another layout: the fingerprints agree, the
	     * layout's CRC does not */
	    {"[8, 2]", ADAMW, "the same parameter count in another layout (hidden [8, 2])"},
	};
	for (size_t i = 0; i < sizeof(others) / sizeof(*others); i++) {
		if (job_make(&other, others[i].hidden, others[i].opt, ckdir, 0, 0, &err) < 0)
			bail_out("job %s: %s", others[i].what, err.text);
		train_ckpt_init(&k, &other.c, tmp, &other.m, &other.o, NULL, 0, 1, SAMPLES);
		if (i == 2 && nn_param_count(&other.m) != nn_param_count(&job.m))
			bail_out("hidden [8, 2] has %zu parameters, hidden [8] %zu",
				 nn_param_count(&other.m), nn_param_count(&job.m));
		int rv = resume(&other, &got, from, sizeof(from), CFG_RESUME_AUTO, NULL, &err);
		snprintf(want, sizeof(want),
			 "%s/step-9 was written for %s; this job trains %s: ", ckdir, theirs,
			 k.fingerprint);
		ok(rv == -1, "%s: auto refuses the newest checkpoint", others[i].what);
		like(err.text, want, "%s: naming it, what it was written for and what this job is",
		     others[i].what);
		job_free(&other);
	}

	/* momentum turned on: the same fingerprint ("optimizer sgd"), but there is no state to
	 * give it */
	char plain_dir[300], step[400];
	snprintf(plain_dir, sizeof(plain_dir), "%s/plain-sgd", tmp);
	if (job_make(&other, HIDDEN, "{\"name\": \"sgd\", \"lr\": 0.1}", plain_dir, 0, 0, &err) < 0)
		bail_out("plain sgd: %s", err.text);
	ok(save(&other, (struct train_pos){.step = 2, .loss_scale = 1}, &err) == 0,
	   "plain SGD (no state) saved: %s", err.text);
	snprintf(step, sizeof(step), "%s/step-2/optim.safetensors", plain_dir);
	ok(access(step, F_OK) != 0, "without optim.safetensors");
	job_free(&other);
	if (job_make(&other, HIDDEN, "{\"name\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9}",
		     plain_dir, 0, 0, &err) < 0)
		bail_out("momentum: %s", err.text);
	int rv = resume(&other, &got, from, sizeof(from), CFG_RESUME_AUTO, NULL, &err);
	ok(rv == -1 && strstr(err.text, step), "SGD with momentum refuses it, naming %s: %s", step,
	   err.text);
	job_free(&other);
}

static void test_save_fails(void)
{
	struct dp_error err = {0};
	struct train_ckpt k;
	struct train_pos pos = {.step = 13, .epoch = 1, .offset = 8, .loss_scale = 1};
	char file[300];

	snprintf(file, sizeof(file), "%s/a-file", tmp);
	spit(file, "x", 1);
	train_ckpt_init(&k, &job.c, tmp, &job.m, &job.o, NULL, 0, 1, SAMPLES);
	snprintf(k.root, sizeof(k.root), "%s", file);
	k.last_saved = 9;
	ok(train_ckpt_save(&k, &pos, &err) == -1, "a checkpoint directory that is a file: -1");
	char want[400];
	snprintf(want, sizeof(want), "writing checkpoint step-13 in %s: ", file);
	like(err.text, want, "the error names the step and the directory: %s", err.text);
	ok(k.last_saved == 9, "last_saved stays the last one written");
}

/* ---------------------------------------------------------------------------------------
 * Two ranks: ZeRO-1. */

struct zero_arg {
	char dir[300];	 /* checkpoint.dir */
	int rank0_fails; /* rank 0's directory is a file */
};

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			snprintf(msg, len, __VA_ARGS__);                                           \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

static int rank_zero(const struct ranks_job *rj, int rank, char *msg, size_t len)
{
	const struct zero_arg *a = rj->arg;
	struct store_opts so = {.master_addr = "127.0.0.1",
				.master_port = rj->port,
				.rank = rank,
				.world_size = rj->world,
				.job = "train-ckpt-test",
				.secret = "train-ckpt-test-secret",
				.timeout_s = 60};
	struct comm_cpu_opts co = {.timeout_s = 60};
	struct store *st = NULL;
	struct comm *comm = NULL;
	struct job sh, whole;
	struct dp_error err = {0};
	struct train_ckpt k;
	struct train_pos pos = {.step = 5,
				.epoch = 0,
				.offset = 40,
				.loss_scale = 2,
				.scale_good = 1},
			 got = {0};
	struct snap s = {0};
	char from[1024] = "", want[4200];
	size_t lo, hi;
	int rv = -1;

	memset(&sh, 0, sizeof(sh));
	memset(&whole, 0, sizeof(whole));
	if (store_open(&st, &so, &err) < 0 || comm_cpu_create(&comm, st, &co, &err) < 0)
		return ranks_msg(msg, len, &err);
	/* every rank has the whole model; its optimizer keeps and updates its share */
	CHECK(job_make(&whole, HIDDEN, ADAMW, a->dir, 0, 0, &err) == 0, "%s", err.text);
	comm_share(whole.m.param_total, rank, rj->world, &lo, &hi);
	CHECK(job_make(&sh, HIDDEN, ADAMW, a->dir, lo, hi, &err) == 0, "%s", err.text);
	job_train(&whole, 3);
	job_train(&sh, 3);
	CHECK(sh.o.state[0].offset == lo && sh.o.state[0].count == hi - lo && lo < hi,
	      "rank %d: state [%zu, %zu) is not its share", rank, sh.o.state[0].offset,
	      sh.o.state[0].offset + sh.o.state[0].count);

	train_ckpt_init(&k, &sh.c, tmp, &sh.m, &sh.o, comm, rank, rj->world, SAMPLES);
	if (rank == 1) /* it touches no file: no shared file system needed */
		snprintf(k.root, sizeof(k.root), "/nonexistent/dptrain-test");
	if (a->rank0_fails) {
		if (rank == 0)
			snprintf(k.root, sizeof(k.root), "%s/a-file", tmp);
		CHECK(train_ckpt_save(&k, &pos, &err) == -1, "a failed save returned 0");
		snprintf(want, sizeof(want), "writing checkpoint step-5 in %s: %s", k.root,
			 rank ? "rank 0: " : "");
		CHECK(strstr(err.text, want) == err.text, "the error is \"%s\", not \"%s...\"",
		      err.text, want);
		CHECK(strstr(err.text, "a-file"), "rank %d's error does not name rank 0's file: %s",
		      rank, err.text);
		/* and a failed resume likewise */
		sh.c.checkpoint.resume = CFG_RESUME_PATH;
		sh.c.checkpoint.resume_path = (char *)"/nonexistent/step-3";
		int r2 = train_ckpt_resume(&k, &got, from, sizeof(from), &err);
		sh.c.checkpoint.resume = CFG_RESUME_AUTO;
		sh.c.checkpoint.resume_path = NULL;
		CHECK(r2 == -1, "a failed resume returned %d", r2);
		snprintf(want, sizeof(want),
			 "%scheckpoint.resume /nonexistent/step-3: ", rank ? "rank 0: " : "");
		CHECK(strstr(err.text, want) == err.text, "the error is \"%s\", not \"%s...\"",
		      err.text, want);
		rv = 0;
		goto out;
	}
	CHECK(train_ckpt_save(&k, &pos, &err) == 0, "save: %s", err.text);
	CHECK(k.last_saved == 5, "last_saved %ld", k.last_saved);
	if (rank == 0) { /* the file has the whole state: a whole optimizer's, bit for bit */
		struct st_file of;
		char path[600];
		snprintf(path, sizeof(path), "%s/step-5/optim.safetensors", a->dir);
		CHECK(st_open(&of, path, &err) == 0, "%s", err.text);
		for (int i = 0; i < whole.o.nstate; i++) {
			const struct st_tensor *t = st_find(&of, whole.o.state[i].name);
			int same = t && t->end - t->begin == whole.m.param_total * sizeof(float) &&
				   !memcmp(st_data(&of, t), whole.o.state[i].data,
					   whole.m.param_total * sizeof(float));
			if (!same)
				st_close(&of);
			CHECK(same, "optim.safetensors: %s is not the whole optimizer's",
			      whole.o.state[i].name);
		}
		st_close(&of);
		snprintf(path, sizeof(path), "%s/step-5/trainer_state.json", a->dir);
		json_t *ts = load_json(path);
		long ws = (long)json_integer_value(json_object_get(ts, "world_size"));
		json_decref(ts);
		CHECK(ws == 2, "trainer_state.json: world_size %ld", ws);
	}
	snap_take(&s, &sh);
	job_scramble(&sh);
	train_ckpt_init(&k, &sh.c, tmp, &sh.m, &sh.o, comm, rank, rj->world, SAMPLES);
	if (rank == 1)
		snprintf(k.root, sizeof(k.root), "/nonexistent/dptrain-test");
	int r = train_ckpt_resume(&k, &got, from, sizeof(from), &err);
	CHECK(r == 1, "resume: %d: %s", r, err.text);
	CHECK(got.step == 5 && got.epoch == 0 && got.offset == 40 && got.loss_scale == 2 &&
		  got.scale_good == 1,
	      "rank %d: position %ld %d %zu %g %ld", rank, got.step, got.epoch, got.offset,
	      got.loss_scale, got.scale_good);
	snprintf(want, sizeof(want), "%s/step-5", a->dir);
	CHECK(!strcmp(from, want), "rank %d: from \"%s\"", rank, from);
	CHECK(snap_same(&s, &sh, rank == 0),
	      "rank %d: its shard of the optimizer state (or rank 0's weights) differs", rank);
	CHECK(k.last_saved == 5, "rank %d: last_saved %ld after the resume", rank, k.last_saved);
	rv = 0;
out:
	snap_free(&s);
	job_free(&sh);
	job_free(&whole);
	if (comm)
		comm->ops->destroy(comm);
	store_close(st, 10);
	return rv;
}

static void test_zero(void)
{
	struct zero_arg a;
	struct ranks_out out[2];
	for (int fails = 0; fails < 2; fails++) {
		memset(&a, 0, sizeof(a));
		snprintf(a.dir, sizeof(a.dir), "%s/zero", tmp);
		a.rank0_fails = fails;
		struct ranks_job rj = {.world = 2, .arg = &a};
		ranks_run(&rj, rank_zero, -1, 120, out);
		for (int r = 0; r < 2; r++) {
			const char *what =
			    fails ? r ? "gets rank 0's error, for the save and the resume"
				      : "fails naming its file, for the save and the resume"
			    : r	  ? "gets the position and its shard back"
				  : "wrote the whole state and gets its shard back";
			ok(out[r].status == 0, "2 ranks, ZeRO-1: rank %d %s", r,
			   out[r].status ? out[r].msg : what);
		}
		if (fails)
			continue;

		/* one rank (another world size) takes the whole state of the two shards */
		struct job one;
		struct dp_error err = {0};
		struct train_pos got;
		struct snap s;
		char from[1024];
		if (job_make(&one, HIDDEN, ADAMW, a.dir, 0, 0, &err) < 0)
			bail_out("%s", err.text);
		job_train(&one, 3);
		snap_take(&s, &one);
		job_scramble(&one);
		ok(resume(&one, &got, from, sizeof(from), CFG_RESUME_AUTO, NULL, &err) == 1 &&
		       got.step == 5 && snap_same(&s, &one, 0),
		   "1 rank resumes the 2 ranks' checkpoint: the whole optimizer state, as if never "
		   "sharded: %s",
		   err.text);
		snap_free(&s);
		job_free(&one);
	}
}

int main(void)
{
	struct dp_error err = {0};
	if (!mkdtemp(tmp))
		bail_out("mkdtemp: %s", strerror(errno));
	snprintf(ckdir, sizeof(ckdir), "%s/ck", tmp);
	if (job_make(&job, HIDDEN, ADAMW, ckdir, 0, 0, &err) < 0)
		bail_out("%s", err.text);
	job_train(&job, 3);
	test_init();
	test_round_trip();
	test_damaged();
	test_forged();
	test_other_job();
	test_save_fails();
	job_free(&job);
	test_zero();
	nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return done_testing();
}
