/* lr_schedule.h — learning-rate schedules as pure functions of the global optimizer step, so a
 * resumed run gets the same rates without any scheduler state to save.
 * Owns the schedule formulas only; the caller maps the job config onto lr_schedule_params.
 *
 * Step s counts optimizer updates from 0 (the lr of the first update is lr_at(s, 0)); the epoch
 * of step s is e = s / steps_per_epoch (integer division); W is the warmup length in steps
 * (warmup_steps, or warmup_epochs * steps_per_epoch), T = total_steps.
 *
 *   lr(s) = warm(s) * main(s),  warm(s) = (s + 1) / W for s < W, else 1
 *   constant:  main(s) = base_lr
 *   step:      main(s) = base_lr * gamma^(e / step_size)
 *   multistep: main(s) = base_lr * gamma^(number of milestones <= e)
 *   cosine:    main(s) = base_lr for s < W; min_lr + (base_lr - min_lr) *
 *              (1 + cos(pi * (s - W) / (T - W))) / 2 for W <= s < T; min_lr for s >= T
 *
 * PyTorch equivalents (checked by t/unit/lr_schedule.c against t/reference/gen_optim.py):
 * warmup is LinearLR(start_factor=1/W, end_factor=1, total_iters=W-1) stepped per iteration;
 * step/multistep are StepLR/MultiStepLR stepped once per epoch, chained with the warmup
 * (both on one optimizer, so their factors multiply; epochs count from the start, warmup
 * included); cosine is SequentialLR([warmup, CosineAnnealingLR(T_max=T-W, eta_min=min_lr)],
 * milestones=[W]) stepped per iteration. Two definitions are ours: past T cosine stays at
 * min_lr (PyTorch's curve would rise again), and warmup starts at base/W, not at 0. */
#ifndef DPTRAIN_LR_SCHEDULE_H
#define DPTRAIN_LR_SCHEDULE_H

#include <stddef.h>
#include "common/error.h"

enum lr_schedule_kind {
	LR_SCHEDULE_CONSTANT,
	LR_SCHEDULE_STEP,
	LR_SCHEDULE_MULTISTEP,
	LR_SCHEDULE_COSINE,
};

#define LR_SCHEDULE_MAX_MILESTONES 32

struct lr_schedule_params {
	enum lr_schedule_kind kind;
	double base_lr;
	long steps_per_epoch; /* optimizer updates per epoch, >= 1 */
	long total_steps;     /* updates in the whole run; cosine needs it, others ignore it */
	long warmup_steps;    /* linear warmup length in updates (0: none) ... */
	long warmup_epochs;   /* ... or in epochs; at most one of the two may be set */
	double gamma;	      /* step, multistep: decay factor */
	long step_size;	      /* step: epochs between decays */
	long milestones[LR_SCHEDULE_MAX_MILESTONES]; /* multistep: epochs, strictly increasing */
	int nmilestones;
	double min_lr; /* cosine: the final rate (eta_min) */
};

struct lr_schedule {
	struct lr_schedule_params p;
	long warmup; /* W, in steps */
};

/* Validates p (every message names the parameter and what to use). 0, or -1 with a message. */
int lr_schedule_init(struct lr_schedule *s, const struct lr_schedule_params *p,
		     struct dp_error *err);
/* The learning rate of update number step (negative steps count as 0). */
double lr_at(const struct lr_schedule *s, long step);
const char *lr_schedule_kind_name(enum lr_schedule_kind kind);

#endif
