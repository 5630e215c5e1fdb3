/* loss_scale.h — loss scaling (precision.loss_scale, precision.dynamic_loss_scale): the loss
 * gradient is multiplied by the scale, so that small gradients survive in half precision, and
 * the gradients are divided by it again before the update (exactly, for a power of two).
 * Dynamic scaling is PyTorch's GradScaler (MindSpore's DynamicLossScaleManager): a step whose
 * gradients overflowed (inf or nan) is skipped and the scale halved; growth_interval good steps
 * in a row double it. Every rank holds the same reduced gradients, so all decide alike without
 * talking. */
#ifndef DPTRAIN_LOSS_SCALE_H
#define DPTRAIN_LOSS_SCALE_H

#include <stdio.h>

#include "common/error.h"
#include "config/config.h"
#include "trainer/nn/nn.h"

struct loss_scale {
	int on, dynamic;
	double scale;		      /* what the loss is multiplied by now */
	long good, interval, skipped; /* good steps in a row; skipped steps in all */
};

/* From the config; on = 0 when there is nothing to scale (a static scale of 1). */
void loss_scale_init(struct loss_scale *sc, const struct cfg_precision *p);

/* After backward (and the reduction) of step (1-based, for messages): 1 when the update may go
 * ahead, with m's gradients unscaled; 0 when it is skipped (overflow; rank0 says so on out);
 * -1 with err when the gradients are not finite even at the smallest scale, or the backend
 * failed. */
int loss_scale_check(struct loss_scale *sc, struct nn_model *m, long step, FILE *out, int rank0,
		     struct dp_error *err);

/* Tests: DPTRAIN_TEST_OVERFLOW_AT="3,7" makes the (reduced) gradients of those steps (1-based,
 * global) infinite, as an fp16 overflow would; set it for every rank. 1 when step is one. */
int loss_scale_test_overflow(long step);

#endif
