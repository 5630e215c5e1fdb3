/* lr_schedule.c — validation and closed forms of the learning-rate schedules in lr_schedule.h.
 * Owns nothing but struct lr_schedule; must stay a pure function of the step (resume relies
 * on it), so no state may be added here. */
#include "trainer/optim/lr_schedule.h"
#include "common/error.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *lr_schedule_kind_name(enum lr_schedule_kind kind)
{
	switch (kind) {
	case LR_SCHEDULE_CONSTANT:
		return "constant";
	case LR_SCHEDULE_STEP:
		return "step";
	case LR_SCHEDULE_MULTISTEP:
		return "multistep";
	case LR_SCHEDULE_COSINE:
		return "cosine";
	}
	return "unknown";
}

static int check_gamma(const struct lr_schedule_params *p, const char *kn, struct dp_error *err)
{
	if (!isfinite(p->gamma) || p->gamma <= 0) {
		errprintf(err,
			  "dptrain: lr schedule %s: gamma %g is invalid; use a decay factor > 0 "
			  "(0.1 is usual)",
			  kn, p->gamma);
		return -1;
	}
	return 0;
}

int lr_schedule_init(struct lr_schedule *s, const struct lr_schedule_params *p,
		     struct dp_error *err)
{
	const char *kn = lr_schedule_kind_name(p->kind);

	memset(s, 0, sizeof(*s));
	if (p->kind != LR_SCHEDULE_CONSTANT && p->kind != LR_SCHEDULE_STEP &&
	    p->kind != LR_SCHEDULE_MULTISTEP && p->kind != LR_SCHEDULE_COSINE) {
		errprintf(err,
			  "dptrain: lr schedule: unknown kind %d (constant, step, multistep or "
			  "cosine)",
			  (int)p->kind);
		return -1;
	}
	if (!isfinite(p->base_lr) || p->base_lr < 0) {
		errprintf(err,
			  "dptrain: lr schedule %s: learning rate %g is invalid; use a "
			  "finite value >= 0",
			  kn, p->base_lr);
		return -1;
	}
	if (p->steps_per_epoch < 1) {
		errprintf(err,
			  "dptrain: lr schedule %s: %ld steps per epoch; an epoch needs at least "
			  "one step (is the dataset smaller than the global batch?)",
			  kn, p->steps_per_epoch);
		return -1;
	}
	if (p->warmup_steps < 0 || p->warmup_epochs < 0 ||
	    (p->warmup_steps > 0 && p->warmup_epochs > 0)) {
		errprintf(
		    err,
		    "dptrain: lr schedule %s: warmup of %ld steps and %ld epochs; give one of "
		    "them, >= 0",
		    kn, p->warmup_steps, p->warmup_epochs);
		return -1;
	}
	if (p->warmup_epochs > LONG_MAX / p->steps_per_epoch) {
		errprintf(err, "dptrain: lr schedule %s: warmup of %ld epochs is too long", kn,
			  p->warmup_epochs);
		return -1;
	}
	s->warmup = p->warmup_steps > 0 ? p->warmup_steps : p->warmup_epochs * p->steps_per_epoch;

	switch (p->kind) {
	case LR_SCHEDULE_CONSTANT:
		break;
	case LR_SCHEDULE_STEP:
		if (check_gamma(p, kn, err) < 0)
			return -1;
		if (p->step_size < 1) {
			errprintf(
			    err,
			    "dptrain: lr schedule step: step_size %ld is invalid; use the number "
			    "of epochs between decays, >= 1",
			    p->step_size);
			return -1;
		}
		break;
	case LR_SCHEDULE_MULTISTEP:
		if (check_gamma(p, kn, err) < 0)
			return -1;
		if (p->nmilestones < 0 || p->nmilestones > LR_SCHEDULE_MAX_MILESTONES) {
			errprintf(err,
				  "dptrain: lr schedule multistep: %d milestones; give at most %d",
				  p->nmilestones, LR_SCHEDULE_MAX_MILESTONES);
			return -1;
		}
		for (int i = 0; i < p->nmilestones; i++) {
			if (p->milestones[i] < 0 ||
			    (i > 0 && p->milestones[i] <= p->milestones[i - 1])) {
				errprintf(
				    err,
				    "dptrain: lr schedule multistep: milestone %d (epoch %ld) is "
				    "invalid; milestones are epochs >= 0 in increasing order",
				    i, p->milestones[i]);
				return -1;
			}
		}
		break;
	case LR_SCHEDULE_COSINE:
		if (!isfinite(p->min_lr) || p->min_lr < 0 || p->min_lr > p->base_lr) {
			errprintf(
			    err,
			    "dptrain: lr schedule cosine: min_lr %g is invalid; use a value in "
			    "[0, learning rate %g]",
			    p->min_lr, p->base_lr);
			return -1;
		}
		if (p->total_steps <= s->warmup) {
			errprintf(
			    err,
			    "dptrain: lr schedule cosine: the run has %ld steps and warmup takes "
			    "%ld; shorten the warmup or train longer",
			    p->total_steps, s->warmup);
			return -1;
		}
		break;
	}
	s->p = *p;
	return 0;
}

static double main_lr(const struct lr_schedule *s, long step)
{
	const struct lr_schedule_params *p = &s->p;
	long epoch = step / p->steps_per_epoch;
	int k = 0;

	switch (p->kind) {
	case LR_SCHEDULE_CONSTANT:
		break;
	case LR_SCHEDULE_STEP:
		return p->base_lr * pow(p->gamma, (double)(epoch / p->step_size));
	case LR_SCHEDULE_MULTISTEP:
		while (k < p->nmilestones && p->milestones[k] <= epoch)
			k++;
		return p->base_lr * pow(p->gamma, k);
	case LR_SCHEDULE_COSINE:
		if (step < s->warmup)
			break;
		if (step >= p->total_steps)
			return p->min_lr;
		return p->min_lr + (p->base_lr - p->min_lr) *
				       (1 + cos(M_PI * (double)(step - s->warmup) /
						(double)(p->total_steps - s->warmup))) /
				       2;
	}
	return p->base_lr;
}

double lr_at(const struct lr_schedule *s, long step)
{
	if (step < 0)
		step = 0;
	double lr = main_lr(s, step);
	if (step < s->warmup)
		lr = lr * (double)(step + 1) / (double)s->warmup;
	return lr;
}
