/* optim_validate.c (test) — trainer/optim/optim.c refuses bad hyperparameters, segments and shards
 * with a message naming what is wrong, and accepts the edge cases a real model has (unsorted
 * segments, empty tensors, adjacent tensors, an empty shard). Defaults are PyTorch's. */
#include "trainer/optim/optim.h"
#include "t/lib/tap.h"

#include <math.h>
#include <string.h>

static const struct optim_segment good[] = {{"b", 10, 6, 0}, {"a", 0, 10, 1}, {"c", 16, 0, 1}};

static void refuse(const struct optim_params *p, const struct optim_segment *segs, int nsegs,
		   size_t total, size_t lo, size_t hi, const char *needle, const char *what)
{
	struct dp_error err = {""};
	struct optim o;
	int rv = optim_init_shard(&o, p, segs, nsegs, total, lo, hi, &err);
	ok(rv == -1, "%s: refused", what);
	like(err.text, needle, "%s: message names it", what);
	ok(!strncmp(err.text, "dptrain: ", 9), "%s: message starts with the program name", what);
	if (rv == 0)
		optim_free(&o);
}

static void refuse_params(const struct optim_params *p, const char *needle, const char *what)
{
	refuse(p, good, 3, 16, 0, 16, needle, what);
}

int main(void)
{
	struct optim_params p;
	struct optim o;
	struct dp_error err;
	int n;

	/* defaults: torch.optim.SGD / AdamW, apex FusedLAMB */
	optim_params_default(&p, OPTIM_ADAMW);
	ok(p.beta1 == 0.9 && p.beta2 == 0.999 && p.eps == 1e-8 && p.weight_decay == 1e-2,
	   "adamw defaults are torch's");
	optim_params_default(&p, OPTIM_LAMB);
	ok(p.eps == 1e-6 && p.weight_decay == 1e-2 && p.max_grad_norm == 0 && !p.nvlamb,
	   "lamb defaults are apex's (clipping off)");
	optim_params_default(&p, OPTIM_SGD);
	ok(p.momentum == 0 && p.dampening == 0 && !p.nesterov && p.weight_decay == 0,
	   "sgd defaults are torch's");
	is(optim_kind_name(OPTIM_LAMB), "lamb", "kind names");

	/* hyperparameters */
	optim_params_default(&p, OPTIM_SGD);
	p.momentum = -0.1;
	refuse_params(&p, "momentum -0.1", "negative momentum");
	optim_params_default(&p, OPTIM_SGD);
	p.momentum = 0.9;
	p.dampening = 0.1;
	p.nesterov = 1;
	refuse_params(&p, "Nesterov momentum needs", "nesterov with dampening");
	optim_params_default(&p, OPTIM_SGD);
	p.nesterov = 1;
	refuse_params(&p, "Nesterov momentum needs", "nesterov without momentum");
	optim_params_default(&p, OPTIM_SGD);
	p.dampening = 1.5;
	refuse_params(&p, "dampening 1.5", "dampening above 1");
	optim_params_default(&p, OPTIM_SGD);
	p.weight_decay = NAN;
	refuse_params(&p, "weight_decay nan", "NaN weight decay");
	optim_params_default(&p, OPTIM_ADAMW);
	p.beta1 = 1.0;
	refuse_params(&p, "betas (1, 0.999)", "beta1 = 1");
	optim_params_default(&p, OPTIM_ADAMW);
	p.beta2 = -0.5;
	refuse_params(&p, "betas", "negative beta2");
	optim_params_default(&p, OPTIM_ADAMW);
	p.eps = -1e-8;
	refuse_params(&p, "eps -1e-08", "negative eps");
	optim_params_default(&p, OPTIM_LAMB);
	p.max_grad_norm = -1;
	refuse_params(&p, "max_grad_norm -1", "negative max_grad_norm");
	optim_params_default(&p, OPTIM_LAMB);
	p.kind = (enum optim_kind)7;
	refuse_params(&p, "unknown kind 7", "unknown kind");

	/* segments and shards */
	optim_params_default(&p, OPTIM_ADAMW);
	refuse(&p, good, 0, 16, 0, 16, "no parameters", "no segments");
	refuse(&p, good, 3, 15, 0, 15, "b [10, +6) runs past the end", "segment past the end");
	{
		const struct optim_segment huge[] = {{"x", 8, (size_t)-4, 1}};
		refuse(&p, huge, 1, 16, 0, 16, "runs past the end", "offset + count overflows");
	}
	{
		const struct optim_segment overlap[] = {
		    {"w", 0, 10, 1}, {"v", 20, 4, 1}, {"u", 9, 3, 0}};
		refuse(&p, overlap, 3, 24, 0, 24, "w [0, +10) and u [9, +3) overlap", "overlap");
	}
	refuse(&p, good, 3, 16, 9, 8, "shard [9, 8)", "shard lo > hi");
	refuse(&p, good, 3, 16, 0, 17, "shard [0, 17)", "shard past the end");

	/* accepted edge cases, and the state each kind keeps */
	ok(optim_init(&o, &p, good, 3, 16, &err) == 0,
	   "unsorted, adjacent and empty segments accepted");
	struct optim_state_buf *sb = optim_state(&o, &n);
	ok(n == 2 && !strcmp(sb[0].name, "exp_avg") && !strcmp(sb[1].name, "exp_avg_sq") &&
	       sb[0].count == 16 && sb[0].offset == 0,
	   "adamw keeps exp_avg and exp_avg_sq over the buffer");
	optim_free(&o);
	optim_free(&o); /* cleared by the first: harmless */

	optim_params_default(&p, OPTIM_SGD);
	ok(optim_init(&o, &p, good, 3, 16, &err) == 0 && optim_state(&o, &n) && n == 0,
	   "sgd without momentum keeps no state");
	optim_free(&o);
	p.momentum = 0.9;
	ok(optim_init_shard(&o, &p, good, 3, 16, 4, 12, &err) == 0 && (sb = optim_state(&o, &n)) &&
	       n == 1 && !strcmp(sb[0].name, "momentum_buffer") && sb[0].offset == 4 &&
	       sb[0].count == 8,
	   "sgd momentum keeps momentum_buffer over its shard only");
	optim_free(&o);

	{
		float params[16] = {1}, grads[16] = {1};
		optim_params_default(&p, OPTIM_LAMB);
		p.max_grad_norm = 1;
		ok(optim_init_shard(&o, &p, good, 3, 16, 16, 16, &err) == 0,
		   "an empty shard is accepted");
		optim_step(&o, params, grads, 0.1);
		ok(params[0] == 1 && o.step == 1,
		   "an empty shard changes nothing, counts the step");
		optim_free(&o);
	}
#if defined(__SANITIZE_ADDRESS__)
	skip(2, "AddressSanitizer aborts on impossible allocations instead of returning NULL");
#else
	{
		/* state larger than the address space: a message, not a crash */
		const struct optim_segment big[] = {{"huge", 0, (size_t)1 << 62, 1}};
		optim_params_default(&p, OPTIM_ADAMW);
		ok(optim_init(&o, &p, big, 1, (size_t)1 << 62, &err) == -1,
		   "state too large for memory: refused");
		like(err.text,
		     "out of memory for its state (2 buffers of 4611686018427387904 floats)",
		     "out of memory: message says how much");
	}
#endif
	return done_testing();
}
