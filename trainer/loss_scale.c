/* loss_scale.c — loss_scale.h on the model's gradients through its backend. */
#include "trainer/loss_scale.h"
#include "common/env.h"

#include <math.h>
#include <stdlib.h>

#include "common/error.h"

#define SCALE_MIN 0x1p-24 /* overflowing even here: the gradients are not finite at all */
#define SCALE_MAX 1e30	  /* precision.loss_scale's largest */

void loss_scale_init(struct loss_scale *sc, const struct cfg_precision *p)
{
	*sc = (struct loss_scale){
	    .on = p->dynamic_loss_scale || p->loss_scale != 1.0,
	    .dynamic = p->dynamic_loss_scale,
	    .scale = p->dynamic_loss_scale ? p->initial_loss_scale : p->loss_scale,
	    .interval = p->growth_interval > 0 ? p->growth_interval : 2000,
	};
}

int loss_scale_check(struct loss_scale *sc, struct nn_model *m, long step, FILE *out, int rank0,
		     struct dp_error *err)
{
	struct backend *be = m->be;
	double ss = 0;
	if (!sc->on)
		return 1;
	if (sc->dynamic) {
		if (be->ops->sumsq(be, m->grads, m->param_total, &ss) < 0)
			return errprintf(err, "loss scaling at step %ld: %s", step, be->err.text);
		if (!isfinite(ss)) {
			sc->skipped++;
			sc->good = 0;
			if (sc->scale / 2 < SCALE_MIN)
				return errprintf(
				    err,
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
		return errprintf(err, "loss scaling at step %ld: %s", step, be->err.text);
	if (sc->dynamic && ++sc->good >= sc->interval) {
		sc->good = 0;
		if (sc->scale * 2 <= SCALE_MAX)
			sc->scale *= 2;
	}
	return 1;
}

int loss_scale_test_overflow(long step)
{
	const char *e = getenv(ENV_DPTRAIN_TEST_OVERFLOW_AT);
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
