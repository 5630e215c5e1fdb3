/* lr_schedule.c (test) — trainer/optim/lr_schedule.c against PyTorch's schedulers (the golden
 * t/reference/data/optim-lr-*.json from t/reference/gen_optim.py), edge cases of our own
 * definitions, and validation messages. */
#include "trainer/optim/lr_schedule.h"
#include "t/lib/tap.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* torch's chainable schedulers update the lr recursively (lr *= ratio each step), ours is the
 * closed form: they agree to rounding accumulated over a few hundred steps. */
#define TOL 1e-12

static const char *const cases[] = {
    "constant-warmup", "step",	 "step-longer-than-run", "multistep-warmup",
    "multistep",       "cosine", "cosine-warmup",	 "cosine-warmup-epochs"};

static json_t *load(const char *name)
{
	char path[4096];
	const char *src = getenv("DPTRAIN_SRC_DIR");
	json_error_t e;
	snprintf(path, sizeof(path), "%s/t/reference/data/%s", src ? src : ".", name);
	json_t *j = json_load_file(path, 0, &e);
	if (!j)
		diag("cannot read %s: %s (line %d); regenerate with 'make reference'", path, e.text,
		     e.line);
	return j;
}

static long inum(json_t *c, const char *key)
{
	return (long)json_integer_value(json_object_get(c, key));
}

static void params_of(json_t *c, struct lr_schedule_params *p)
{
	const char *kind = json_string_value(json_object_get(c, "kind"));
	json_t *m;
	size_t i;

	memset(p, 0, sizeof(*p));
	p->kind = !strcmp(kind, "step")	       ? LR_SCHEDULE_STEP
		  : !strcmp(kind, "multistep") ? LR_SCHEDULE_MULTISTEP
		  : !strcmp(kind, "cosine")    ? LR_SCHEDULE_COSINE
					       : LR_SCHEDULE_CONSTANT;
	p->base_lr = json_number_value(json_object_get(c, "base_lr"));
	p->steps_per_epoch = inum(c, "steps_per_epoch");
	p->total_steps = inum(c, "total_steps");
	p->warmup_steps = inum(c, "warmup_steps");
	p->warmup_epochs = inum(c, "warmup_epochs");
	p->gamma = json_number_value(json_object_get(c, "gamma"));
	p->step_size = inum(c, "step_size");
	p->min_lr = json_number_value(json_object_get(c, "min_lr"));
	json_array_foreach(json_object_get(c, "milestones"), i, m)
	{
		if (i < LR_SCHEDULE_MAX_MILESTONES)
			p->milestones[p->nmilestones++] = (long)json_integer_value(m);
	}
}

static void golden(const char *name)
{
	char file[256];
	struct dp_error err;
	struct lr_schedule_params p;
	struct lr_schedule s;
	json_t *c, *lrs;
	double worst = 0;
	long at = -1;

	snprintf(file, sizeof(file), "optim-lr-%s.json", name);
	if (!(c = load(file))) {
		fail("%s: golden file", name);
		return;
	}
	params_of(c, &p);
	if (!ok(lr_schedule_init(&s, &p, &err) == 0, "%s: init", name))
		diag("%s", err.text);
	lrs = json_object_get(c, "lr");
	for (size_t i = 0; i < json_array_size(lrs); i++) {
		double want = json_number_value(json_array_get(lrs, i));
		double e = fabs(lr_at(&s, (long)i) - want) / (want > 0 ? want : 1);
		if (e > worst || isnan(e)) {
			worst = isnan(e) ? INFINITY : e;
			at = (long)i;
		}
	}
	ok(json_array_size(lrs) >= 100 && worst <= TOL,
	   "%s: %zu steps match torch, max rel err %.3g (step %ld)", name, json_array_size(lrs),
	   worst, at);
	json_decref(c);
}

static struct lr_schedule make(const struct lr_schedule_params *p)
{
	struct lr_schedule s;
	struct dp_error err;
	if (lr_schedule_init(&s, p, &err) < 0)
		bail_out("%s", err.text);
	return s;
}

static void edges(void)
{
	struct lr_schedule_params p = {
	    .kind = LR_SCHEDULE_CONSTANT, .base_lr = 0.1, .steps_per_epoch = 10};
	struct lr_schedule s = make(&p);
	ok(lr_at(&s, 0) == 0.1 && lr_at(&s, 1000000) == 0.1, "constant, warmup 0: base lr always");
	ok(lr_at(&s, -5) == 0.1, "negative steps count as step 0");

	p.warmup_steps = 4;
	s = make(&p);
	ok(lr_at(&s, 0) == 0.025 && lr_at(&s, 1) == 0.05 && lr_at(&s, 3) == 0.1 &&
	       lr_at(&s, 4) == 0.1,
	   "warmup: base*(s+1)/W, reaching base at s = W-1");
	p.warmup_steps = 1;
	s = make(&p);
	ok(lr_at(&s, 0) == 0.1, "warmup of 1 step is no warmup");
	p.warmup_steps = 0;
	p.warmup_epochs = 2;
	s = make(&p);
	ok(s.warmup == 20 && lr_at(&s, 9) == 0.1 * 10 / 20, "warmup_epochs * steps_per_epoch");

	p = (struct lr_schedule_params){.kind = LR_SCHEDULE_STEP,
					.base_lr = 1,
					.steps_per_epoch = 5,
					.gamma = 0.5,
					.step_size = 1000};
	s = make(&p);
	ok(lr_at(&s, 4999) == 1 && lr_at(&s, 5000) == 0.5, "step_size beyond the run: no decay");
	p.step_size = 2;
	s = make(&p);
	ok(lr_at(&s, 9) == 1 && lr_at(&s, 10) == 0.5 && lr_at(&s, 20) == 0.25,
	   "step decays at epoch boundaries");

	p = (struct lr_schedule_params){.kind = LR_SCHEDULE_MULTISTEP,
					.base_lr = 1,
					.steps_per_epoch = 3,
					.gamma = 0.1,
					.nmilestones = 2,
					.milestones = {2, 1000}};
	s = make(&p);
	ok(lr_at(&s, 5) == 1 && fabs(lr_at(&s, 6) - 0.1) < 1e-15 &&
	       fabs(lr_at(&s, 2999) - 0.1) < 1e-15,
	   "multistep: milestones beyond the run never apply");
	p.nmilestones = 0;
	s = make(&p);
	ok(lr_at(&s, 100) == 1, "multistep without milestones is constant");

	p = (struct lr_schedule_params){.kind = LR_SCHEDULE_COSINE,
					.base_lr = 1,
					.steps_per_epoch = 10,
					.total_steps = 100,
					.min_lr = 0.01,
					.warmup_steps = 20};
	s = make(&p);
	ok(lr_at(&s, 20) == 1 && fabs(lr_at(&s, 60) - (0.01 + 0.99 / 2)) < 1e-15,
	   "cosine starts at base after warmup, half way at the middle");
	ok(lr_at(&s, 99) > 0.01 && lr_at(&s, 100) == 0.01 && lr_at(&s, 5000) == 0.01,
	   "cosine stays at min_lr past the end");
	double prev = 2;
	int mono = 1;
	for (long i = 20; i < 100; i++) {
		mono &= lr_at(&s, i) < prev;
		prev = lr_at(&s, i);
	}
	ok(mono, "cosine decreases strictly after warmup");
}

static void refuse(const struct lr_schedule_params *p, const char *needle, const char *what)
{
	struct lr_schedule s;
	struct dp_error err = {""};
	ok(lr_schedule_init(&s, p, &err) == -1, "%s: refused", what);
	like(err.text, needle, "%s: message names it", what);
	ok(!strncmp(err.text, "dptrain: ", 9), "%s: message starts with the program name", what);
}

static void validation(void)
{
	const struct lr_schedule_params ok_step = {.kind = LR_SCHEDULE_STEP,
						   .base_lr = 0.1,
						   .steps_per_epoch = 10,
						   .gamma = 0.1,
						   .step_size = 30};
	struct lr_schedule_params p = ok_step;

	p.base_lr = -1;
	refuse(&p, "learning rate -1", "negative lr");
	p = ok_step;
	p.steps_per_epoch = 0;
	refuse(&p, "0 steps per epoch", "empty epoch");
	p = ok_step;
	p.warmup_steps = 5;
	p.warmup_epochs = 1;
	refuse(&p, "give one of them", "both warmups");
	p = ok_step;
	p.warmup_epochs = -1;
	refuse(&p, "give one of them", "negative warmup");
	p = ok_step;
	p.warmup_epochs = LONG_MAX / 5;
	refuse(&p, "too long", "warmup overflow");
	p = ok_step;
	p.gamma = 0;
	refuse(&p, "gamma 0", "zero gamma");
	p = ok_step;
	p.step_size = 0;
	refuse(&p, "step_size 0", "zero step_size");
	p = (struct lr_schedule_params){.kind = LR_SCHEDULE_MULTISTEP,
					.base_lr = 0.1,
					.steps_per_epoch = 10,
					.gamma = 0.1,
					.nmilestones = 3,
					.milestones = {30, 60, 60}};
	refuse(&p, "milestone 2 (epoch 60)", "repeated milestone");
	p.nmilestones = LR_SCHEDULE_MAX_MILESTONES + 1;
	refuse(&p, "give at most", "too many milestones");
	p = (struct lr_schedule_params){.kind = LR_SCHEDULE_COSINE,
					.base_lr = 0.1,
					.steps_per_epoch = 10,
					.total_steps = 100,
					.warmup_steps = 100};
	refuse(&p, "100 steps and warmup takes 100", "warmup covers the run");
	p.warmup_steps = 0;
	p.min_lr = 0.2;
	refuse(&p, "min_lr 0.2", "min_lr above lr");
	p.kind = (enum lr_schedule_kind)9;
	refuse(&p, "unknown kind 9", "unknown kind");
}

int main(void)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++)
		golden(cases[i]);
	edges();
	validation();
	return done_testing();
}
