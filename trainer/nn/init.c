/* init.c — initial weights as PyTorch draws them (distributions, not the same random
 * numbers): nn.Linear/nn.Conv2d defaults (kaiming_uniform(a=sqrt(5)): U(±1/sqrt(fan_in)) for
 * weight and bias) for mlp and lenet; torchvision's ResNet init (conv kaiming_normal fan_out
 * relu, BN weight 1 bias 0, fc as nn.Linear). Deterministic from the seed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/nn/nn.h"

struct init_rng {
	uint64_t s;
};

static uint64_t next64(struct init_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double uniform01(struct init_rng *r)
{
	return (double)(next64(r) >> 11) * (1.0 / 9007199254740992.0);
}

static double normal(struct init_rng *r)
{
	double u1 = uniform01(r), u2 = uniform01(r);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

int nn_init_weights(struct nn_model *m, uint64_t seed, struct dp_error *err)
{
	int rv = -1;
	int resnet = strncmp(m->name, "resnet", 6) == 0;
	float *host = calloc(m->param_total ? m->param_total : 1, sizeof(float));
	float *state = calloc(m->state_total ? m->state_total : 1, sizeof(float));
	if (!host || !state) {
		errprintf(err, "out of memory initialising %s", m->name);
		goto out;
	}
	for (int i = 0; i < m->nparams; i++) {
		const struct nn_param *p = &m->params[i];
		const struct nn_node *n = &m->nodes[p->node];
		/* one stream per parameter, so adding a layer does not reshuffle the others */
		struct init_rng r = {seed * 0x100000001b3ULL + (uint64_t)i * 0x9e3779b97f4a7c15ULL};
		float *w = host + p->offset;
		int is_weight = p->ndim > 1;
		/* fan_in/fan_out come from the layer's weight, for its bias too */
		const struct nn_param *wp = &m->params[n->w];
		size_t fan_in = 1;
		for (int d = 1; d < wp->ndim; d++)
			fan_in *= (size_t)wp->shape[d];
		if (n->kind == NN_BN) {
			float v = strstr(p->name, ".weight") ? 1.0f : 0.0f;
			for (size_t j = 0; j < p->count; j++)
				w[j] = v;
		} else if (resnet && n->kind == NN_CONV && is_weight) {
			/* kaiming_normal_(mode="fan_out", nonlinearity="relu") */
			size_t fan_out =
			    (size_t)wp->shape[0] * (size_t)wp->shape[2] * (size_t)wp->shape[3];
			double std = sqrt(2.0 / (double)fan_out);
			for (size_t j = 0; j < p->count; j++)
				w[j] = (float)(std * normal(&r));
		} else {
			double bound = 1.0 / sqrt((double)fan_in);
			for (size_t j = 0; j < p->count; j++)
				w[j] = (float)((2.0 * uniform01(&r) - 1.0) * bound);
		}
	}
	for (int i = 0; i < m->nbufs; i++) {
		const struct nn_buffer *q = &m->bufs[i];
		float v = strstr(q->name, "running_var") ? 1.0f : 0.0f;
		for (size_t j = 0; j < q->count; j++)
			state[q->offset + j] = v;
	}
	m->batches_tracked = 0;
	if (m->be->ops->from_host(m->be, m->weights, host, m->param_total * sizeof(float)) < 0 ||
	    m->be->ops->from_host(m->be, m->state, state, m->state_total * sizeof(float)) < 0) {
		errprintf(err, "initialising %s: %s", m->name, m->be->err.text);
		goto out;
	}
	rv = 0;
out:
	free(host);
	free(state);
	return rv;
}
