/* nn.c — the model graph: building blocks, parameter layout, memory planning, forward and
 * backward schedules. Every number is computed by backend ops; this file only decides what
 * runs when and where its inputs and outputs live. */
#include "trainer/nn/nn.h"
#include "trainer/nn/nn_build.h"
#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN_FLOATS 16 /* each parameter starts on a 64-byte boundary */

static size_t act_numel(const struct nn_act *a)
{
	return (size_t)a->c * (size_t)a->h * (size_t)a->w;
}

/* Fuse relu(add(bn(x), z)) into one BN node (NN_BN with in[1] = z, relu set): ResNet's residual
 * join, which cuDNN computes in one pass and which saves two activations per block. The add
 * computes in float what the fused op computes, so the numbers do not change. The BN node moves
 * to the add's place (z may be produced after it, by a downsample branch); parameters keep
 * their registration (state_dict) order, and the bypassed activations are marked unused. */
static void fuse_bn_add_relu(struct nn_model *m)
{
	for (int ia = 0; ia < m->nnodes; ia++) {
		struct nn_node *a = &m->nodes[ia];
		if (a->kind != NN_ADD)
			continue;
		int ir = -1, ib = -1, z = -1, nread = 0;
		for (int i = 0; i < m->nnodes; i++) {
			const struct nn_node *n = &m->nodes[i];
			nread += (n->in[0] == a->out) + (n->in[1] == a->out);
			if (n->in[0] == a->out && n->kind == NN_RELU)
				ir = i;
		}
		if (ir < 0 || nread != 1)
			continue;
		for (int j = 0; j < 2 && ib < 0; j++) {
			int t = a->in[j], treads = 0, p = -1;
			for (int i = 0; i < m->nnodes; i++) {
				const struct nn_node *n = &m->nodes[i];
				treads += (n->in[0] == t) + (n->in[1] == t);
				if (n->out == t)
					p = i;
			}
			/* z must have a gradient buffer (not the model input) */
			if (p >= 0 && p < ia && treads == 1 && m->nodes[p].kind == NN_BN &&
			    !m->nodes[p].relu && m->nodes[p].in[1] < 0 &&
			    nn_act_root(m, a->in[1 - j]) != 0) {
				ib = p;
				z = a->in[1 - j];
			}
		}
		if (ib < 0)
			continue;
		struct nn_node bn = m->nodes[ib];
		m->acts[bn.out].unused = 1;
		m->acts[a->out].unused = 1;
		bn.in[1] = z;
		bn.relu = 1;
		bn.out = m->nodes[ir].out;
		/* New order: drop ib and ir, put bn where the add was. */
		int w = 0;
		for (int i = 0; i < m->nnodes; i++) {
			if (i == ib || i == ir)
				continue;
			m->nodes[w++] = i == ia ? bn : m->nodes[i];
		}
		m->nnodes = w;
		ia = -1; /* indices moved: scan again (each fusion removes two nodes) */
	}
	for (int i = 0; i < m->nnodes; i++) {
		const int idx[2] = {m->nodes[i].w, m->nodes[i].b};
		for (int k = 0; k < 2; k++)
			if (idx[k] >= 0)
				m->params[idx[k]].node = i;
	}
}

/* Decide in-place ReLUs, the flat parameter layout and the gradient slots. */
static int plan(struct nn_model *m, struct dp_error *err)
{
	/* consumers */
	for (int i = 0; i < m->nacts; i++)
		m->acts[i].consumers = 0;
	for (int i = 0; i < m->nnodes; i++)
		for (int j = 0; j < 2; j++)
			if (m->nodes[i].in[j] >= 0)
				m->acts[m->nodes[i].in[j]].consumers++;
	size_t nacts = m->nacts > 0 ? (size_t)m->nacts : 1;
	int *producer = calloc(nacts, sizeof(int));
	int *last_use = calloc(nacts, sizeof(int));
	if (!producer || !last_use) {
		free(producer);
		free(last_use);
		return errprintf(err, "out of memory planning the model");
	}
	for (int i = 0; i < m->nacts; i++)
		producer[i] = -1;
	for (int i = 0; i < m->nnodes; i++)
		producer[m->nodes[i].out] = i;
	for (int i = 0; i < m->nnodes; i++) {
		struct nn_node *n = &m->nodes[i];
		if (n->kind != NN_RELU)
			continue;
		int in = n->in[0], p = producer[in];
		int needs_out =
		    p >= 0 && (m->nodes[p].kind == NN_RELU || m->nodes[p].kind == NN_MAXPOOL ||
			       m->nodes[p].kind == NN_AVGPOOL ||
			       (m->nodes[p].kind == NN_BN && m->nodes[p].relu));
		if (in != 0 && m->acts[in].consumers == 1 && !needs_out)
			m->acts[n->out].alias = in;
	}
	/* BN's input must have a single reader: its backward always overwrites dx. */
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i].kind == NN_BN &&
		    m->acts[nn_act_root(m, m->nodes[i].in[0])].consumers > 1) {
			free(producer);
			free(last_use);
			return errprintf(err, "%s: batch norm input is read twice",
					 m->nodes[i].name);
		}

	/* Parameters in reverse registration order: the last layer's bias sits at offset 0, so
	 * the gradients backward produces first are contiguous at the front (DDP buckets). */
	size_t off = 0;
	for (int i = m->nparams - 1; i >= 0; i--) {
		m->params[i].offset = off;
		off += (m->params[i].count + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
	}
	m->param_total = off;

	/* Gradient slots: the gradient of activation a (its root) is live in backward from the
	 * backward of its last reader down to the backward of its producer. Greedy reuse in
	 * backward order; slots hold whole per-sample sizes (scaled by capacity later). */
	for (int i = 0; i < m->nacts; i++)
		last_use[i] = -1;
	for (int i = 0; i < m->nnodes; i++)
		for (int j = 0; j < 2; j++)
			if (m->nodes[i].in[j] >= 0) {
				int r = nn_act_root(m, m->nodes[i].in[j]);
				if (i > last_use[r])
					last_use[r] = i;
			}
	int last = nn_act_root(m, m->nodes[m->nnodes - 1].out);
	last_use[last] = m->nnodes; /* the loss writes the logits gradient first */
	int *slot_free_below = calloc((size_t)m->nacts + 1, sizeof(int));
	m->gslot_size = calloc((size_t)m->nacts + 1, sizeof(size_t));
	if (!slot_free_below || !m->gslot_size) {
		free(producer);
		free(last_use);
		free(slot_free_below);
		return errprintf(err, "out of memory planning the model");
	}
	m->ngslots = 0;
	for (int t = m->nnodes; t >= 0; t--) {
		for (int a = 1; a < m->nacts; a++) {
			if (m->acts[a].alias >= 0 || m->acts[a].unused || last_use[a] != t)
				continue;
			int s;
			for (s = 0; s < m->ngslots; s++)
				if (slot_free_below[s] > t)
					break;
			if (s == m->ngslots)
				m->ngslots++;
			slot_free_below[s] = producer[a] < 0 ? 0 : producer[a];
			m->acts[a].gslot = s;
			if (act_numel(&m->acts[a]) > m->gslot_size[s])
				m->gslot_size[s] = act_numel(&m->acts[a]);
		}
	}
	free(slot_free_below);
	free(producer);
	free(last_use);
	return 0;
}

int nn_build(struct nn_model *m, struct backend *be, const struct nn_spec *spec,
	     struct dp_error *err)
{
	const char *name = spec->name;
	memset(m, 0, sizeof(*m));
	m->be = be;
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->in_c = spec->c;
	m->in_h = spec->h;
	m->in_w = spec->w;
	m->classes = spec->classes;
	m->spec = *spec;
	m->spec.name = m->name;
	m->spec.stem = NULL;
	m->spec.hidden = NULL;
	m->training = 1;
	if (spec->c < 1 || spec->h < 1 || spec->w < 1 || spec->classes < 1)
		return errprintf(err, "model %s: input %dx%dx%d with %d classes is not valid", name,
				 spec->c, spec->h, spec->w, spec->classes);
	struct builder b = {.m = m};
	nn_b_input(&b, spec->c, spec->h, spec->w);
	if (nn_models_build(&b, spec, err) < 0)
		goto fail;
	if (b.oom) {
		errprintf(err, "out of memory building model %s", name);
		goto fail;
	}
	const struct nn_act *out = &m->acts[m->nodes[m->nnodes - 1].out];
	if (act_numel(out) != (size_t)spec->classes) {
		errprintf(err, "model %s: output has %zu values, expected %d classes", name,
			  act_numel(out), spec->classes);
		goto fail;
	}
	if (!spec->unfused)
		fuse_bn_add_relu(m);
	if (plan(m, err) < 0)
		goto fail;
	size_t pbytes = m->param_total * sizeof(float);
	m->weights = be->ops->alloc(be, pbytes);
	m->grads = be->ops->alloc(be, pbytes + NN_GRAD_SPARE * sizeof(float));
	m->state = be->ops->alloc(be, (m->state_total ? m->state_total : 1) * sizeof(float));
	if (!m->weights || !m->grads || !m->state) {
		errprintf(err, "cannot allocate %zu parameters of model %s", m->param_total, name);
		goto fail;
	}
	if (be->ops->fill(be, m->weights, 0.0f, m->param_total) < 0 ||
	    be->ops->fill(be, m->grads, 0.0f, m->param_total + NN_GRAD_SPARE) < 0) {
		errprintf(err, "%s", be->err.text);
		goto fail;
	}
	for (int i = 0; i < m->nnodes; i++) {
		struct nn_node *n = &m->nodes[i];
		if (n->kind != NN_BN)
			continue;
		int ch = m->acts[n->in[0]].c;
		n->save_mean = be->ops->alloc(be, (size_t)ch * sizeof(float));
		n->save_invstd = be->ops->alloc(be, (size_t)ch * sizeof(float));
		if (!n->save_mean || !n->save_invstd) {
			errprintf(err, "out of memory for %s", n->name);
			goto fail;
		}
	}
	return 0;
fail:
	nn_free(m);
	return -1;
}

static void free_activations(struct nn_model *m)
{
	struct backend *be = m->be;
	for (int i = 1; i < m->nacts; i++) {
		if (m->acts[i].alias < 0 && m->acts[i].data)
			be->ops->free(be, m->acts[i].data);
		m->acts[i].data = NULL;
	}
	if (m->input)
		be->ops->free(be, m->input);
	m->input = NULL;
	for (int s = 0; s < m->ngslots && m->gslots; s++)
		if (m->gslots[s])
			be->ops->free(be, m->gslots[s]);
	free(m->gslots);
	m->gslots = NULL;
	m->capacity = 0;
}

void nn_free(struct nn_model *m)
{
	struct backend *be = m->be;
	if (!be)
		return;
	free_activations(m);
	for (int i = 0; i < m->nnodes; i++) {
		struct nn_node *n = &m->nodes[i];
		for (int j = 0; j < NN_OPS_CACHED; j++)
			if (n->op[j])
				be->ops->op_destroy(be, n->op[j]);
		if (n->save_mean)
			be->ops->free(be, n->save_mean);
		if (n->save_invstd)
			be->ops->free(be, n->save_invstd);
	}
	if (m->weights)
		be->ops->free(be, m->weights);
	if (m->grads)
		be->ops->free(be, m->grads);
	if (m->state)
		be->ops->free(be, m->state);
	free(m->nodes);
	free(m->acts);
	free(m->params);
	free(m->bufs);
	free(m->gslot_size);
	memset(m, 0, sizeof(*m));
}

int nn_reserve(struct nn_model *m, int batch, struct dp_error *err)
{
	struct backend *be = m->be;
	if (batch <= m->capacity)
		return 0;
	free_activations(m);
	m->gslots = calloc((size_t)m->ngslots + 1, sizeof(float *));
	if (!m->gslots)
		return errprintf(err, "out of memory");
	size_t es = be->act_size;
	for (int i = 1; i < m->nacts; i++) {
		if (m->acts[i].alias >= 0 || m->acts[i].unused)
			continue;
		m->acts[i].data = be->ops->alloc(be, act_numel(&m->acts[i]) * (size_t)batch * es);
		if (!m->acts[i].data)
			goto oom;
	}
	if (be->ops->act_import &&
	    !(m->input = be->ops->alloc(be, act_numel(&m->acts[0]) * (size_t)batch * es)))
		goto oom;
	for (int i = 1; i < m->nacts; i++)
		if (m->acts[i].alias >= 0)
			m->acts[i].data = m->acts[nn_act_root(m, i)].data;
	for (int s = 0; s < m->ngslots; s++) {
		m->gslots[s] = be->ops->alloc(be, m->gslot_size[s] * (size_t)batch * es);
		if (!m->gslots[s])
			goto oom;
	}
	m->capacity = batch;
	return 0;
oom:
	free_activations(m);
	return errprintf(err, "cannot allocate activations of %s for batch %d", m->name, batch);
}

/* ---- forward / backward -------------------------------------------------------------- */

static struct be_op *node_op(struct nn_model *m, struct nn_node *n, int batch, struct dp_error *err)
{
	struct backend *be = m->be;
	for (int j = 0; j < NN_OPS_CACHED; j++)
		if (n->op[j] && n->op_n[j] == batch)
			return n->op[j];
	int slot = 0;
	for (int j = 0; j < NN_OPS_CACHED; j++)
		if (!n->op[j]) {
			slot = j;
			goto have_slot;
		}
	/* all in use: drop the last one (the first ones are the steady-state sizes) */
	slot = NN_OPS_CACHED - 1;
	be->ops->op_destroy(be, n->op[slot]);
	n->op[slot] = NULL;
have_slot:;
	const struct nn_act *in = &m->acts[n->in[0]];
	struct be_op *op = NULL;
	switch (n->kind) {
	case NN_CONV: {
		struct be_conv_desc d = {.n = batch,
					 .c = in->c,
					 .h = in->h,
					 .w = in->w,
					 .k = n->k,
					 .kh = n->kh,
					 .kw = n->kw,
					 .stride = n->stride,
					 .pad = n->pad,
					 .has_bias = n->bias};
		op = be->ops->conv_create(be, &d);
		break;
	}
	case NN_BN: {
		struct be_bn_desc d = {.n = batch,
				       .c = in->c,
				       .h = in->h,
				       .w = in->w,
				       .eps = n->eps,
				       .fuse_relu = n->relu,
				       .fuse_add = n->in[1] >= 0};
		op = be->ops->bn_create(be, &d);
		break;
	}
	case NN_MAXPOOL:
	case NN_AVGPOOL: {
		struct be_pool_desc d = {.kind = n->kind == NN_MAXPOOL ? BE_POOL_MAX : BE_POOL_AVG,
					 .n = batch,
					 .c = in->c,
					 .h = in->h,
					 .w = in->w,
					 .kh = n->kh,
					 .kw = n->kw,
					 .stride = n->stride,
					 .pad = n->pad};
		op = be->ops->pool_create(be, &d);
		break;
	}
	case NN_LINEAR: {
		const struct nn_act *r = &m->acts[nn_act_root(m, n->in[0])]; /* before flattening */
		struct be_linear_desc d = {
		    .n = batch, .in = (int)act_numel(in), .out = n->k, .has_bias = n->bias};
		if (r->h * r->w > 1) {
			d.c = r->c;
			d.h = r->h;
			d.w = r->w;
		}
		op = be->ops->linear_create(be, &d);
		break;
	}
	default:
		break;
	}
	if (!op) {
		errprintf(err, "%s: %s", n->name, be->err.text);
		return NULL;
	}
	n->op[slot] = op;
	n->op_n[slot] = batch;
	return op;
}

static float *P(struct nn_model *m, int idx)
{
	return idx < 0 ? NULL : m->weights + m->params[idx].offset;
}

static float *G(struct nn_model *m, int idx)
{
	return idx < 0 ? NULL : m->grads + m->params[idx].offset;
}

static float *S(struct nn_model *m, int idx)
{
	return m->state + m->bufs[idx].offset;
}

/* Aliases share their root's memory; act 0 (the input) changes with every batch. */
static float *data_of(struct nn_model *m, int act)
{
	return m->acts[nn_act_root(m, act)].data;
}

static float *grad_of(struct nn_model *m, int act)
{
	int r = nn_act_root(m, act);
	return m->acts[r].gslot < 0 ? NULL : m->gslots[m->acts[r].gslot];
}

#define BE_CALL(call)                                                                              \
	do {                                                                                       \
		if ((call) < 0)                                                                    \
			return errprintf(err, "%s: %s", n->name, be->err.text);                    \
	} while (0)

int nn_forward(struct nn_model *m, const float *x, int batch, float **logits, struct dp_error *err)
{
	struct backend *be = m->be;
	if (nn_reserve(m, batch, err) < 0)
		return -1;
	m->acts[0].data = (float *)x;
	if (be->ops->act_import) {
		const struct nn_act *a = &m->acts[0];
		if (be->ops->act_import(be, x, m->input, batch, a->c, a->h, a->w) < 0)
			return errprintf(err, "input: %s", be->err.text);
		m->acts[0].data = m->input;
	}
	for (int i = 0; i < m->nnodes; i++) {
		struct nn_node *n = &m->nodes[i];
		const float *in = data_of(m, n->in[0]);
		float *out = data_of(m, n->out);
		size_t numel = act_numel(&m->acts[n->out]) * (size_t)batch;
		struct be_op *op = NULL;
		if (n->kind == NN_CONV || n->kind == NN_BN || n->kind == NN_MAXPOOL ||
		    n->kind == NN_AVGPOOL || n->kind == NN_LINEAR) {
			op = node_op(m, n, batch, err);
			if (!op)
				return -1;
		}
		switch (n->kind) {
		case NN_CONV:
			BE_CALL(be->ops->conv_fwd(be, op, in, P(m, n->w), P(m, n->b), out));
			break;
		case NN_BN: {
			const float *z = n->in[1] >= 0 ? data_of(m, n->in[1]) : NULL;
			if (m->training)
				BE_CALL(be->ops->bn_fwd_train(
				    be, op, in, z, P(m, n->w), P(m, n->b), out, n->save_mean,
				    n->save_invstd, S(m, n->rmean), S(m, n->rvar), n->momentum));
			else
				BE_CALL(be->ops->bn_fwd_infer(be, op, in, z, P(m, n->w), P(m, n->b),
							      S(m, n->rmean), S(m, n->rvar), out));
			break;
		}
		case NN_RELU:
			BE_CALL(be->ops->relu_fwd(be, in, out, numel));
			break;
		case NN_MAXPOOL:
		case NN_AVGPOOL:
			BE_CALL(be->ops->pool_fwd(be, op, in, out));
			break;
		case NN_GAP: {
			const struct nn_act *a = &m->acts[n->in[0]];
			BE_CALL(be->ops->gap_fwd(be, in, out, batch, a->c, a->h * a->w));
			break;
		}
		case NN_FLATTEN:
			break;
		case NN_LINEAR:
			BE_CALL(be->ops->linear_fwd(be, op, in, P(m, n->w), P(m, n->b), out));
			break;
		case NN_ADD:
			BE_CALL(be->ops->add(be, in, data_of(m, n->in[1]), out, numel));
			break;
		}
	}
	if (m->training)
		m->batches_tracked++;
	*logits = data_of(m, m->nodes[m->nnodes - 1].out);
	return 0;
}

int nn_loss(struct nn_model *m, const int32_t *labels, int batch, float smoothing, float scale,
	    float *loss, int *correct, struct dp_error *err)
{
	struct backend *be = m->be;
	int out = m->nodes[m->nnodes - 1].out;
	float *dlogits = m->training ? grad_of(m, out) : NULL;
	if (be->ops->xent(be, data_of(m, out), labels, batch, m->classes, smoothing, scale, loss,
			  correct, dlogits) < 0)
		return errprintf(err, "loss: %s", be->err.text);
	return 0;
}

#undef BE_CALL
#define BE_CALL(call)                                                                              \
	do {                                                                                       \
		if ((call) < 0) {                                                                  \
			errprintf(err, "%s backward: %s", n->name, be->err.text);                  \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

static void node_param_range(const struct nn_model *m, const struct nn_node *n, size_t *lo,
			     size_t *hi)
{
	*lo = (size_t)-1;
	*hi = 0;
	const int idx[2] = {n->w, n->b};
	for (int j = 0; j < 2; j++) {
		if (idx[j] < 0)
			continue;
		const struct nn_param *p = &m->params[idx[j]];
		if (p->offset < *lo)
			*lo = p->offset;
		if (p->offset + p->count > *hi)
			*hi = p->offset + p->count;
	}
}

/* The hook: node n's parameter gradients are final (conv and linear call it before their
 * input gradient, so communication overlaps that too). */
static void grads_final(struct nn_model *m, const struct nn_node *n)
{
	if (m->hook && (n->w >= 0 || n->b >= 0)) {
		size_t lo, hi;
		node_param_range(m, n, &lo, &hi);
		m->hook(m->hook_ctx, lo, hi - lo);
	}
}

int nn_backward(struct nn_model *m, int batch, float beta, struct dp_error *err)
{
	struct backend *be = m->be;
	int rv = -1;
	float *scratch = NULL;
	for (int i = 0; i < m->nacts; i++)
		m->acts[i].grad_written = 0;
	m->acts[nn_act_root(m, m->nodes[m->nnodes - 1].out)].grad_written = 1;
	for (int i = m->nnodes - 1; i >= 0; i--) {
		struct nn_node *n = &m->nodes[i];
		int in0 = n->in[0], r0 = nn_act_root(m, in0);
		const float *x = data_of(m, in0);
		const float *y = data_of(m, n->out);
		float *dy = grad_of(m, n->out);
		float *dx = r0 == 0 ? NULL : grad_of(m, in0);
		float bx = m->acts[r0].grad_written ? 1.0f : 0.0f;
		size_t numel = act_numel(&m->acts[n->out]) * (size_t)batch;
		struct be_op *op = NULL;
		if (n->kind == NN_CONV || n->kind == NN_BN || n->kind == NN_MAXPOOL ||
		    n->kind == NN_AVGPOOL || n->kind == NN_LINEAR) {
			op = node_op(m, n, batch, err);
			if (!op)
				goto out;
		}
		switch (n->kind) {
		case NN_CONV:
			BE_CALL(
			    be->ops->conv_bwd_weights(be, op, x, dy, G(m, n->w), G(m, n->b), beta));
			grads_final(m,
				    n); /* DDP may send them while the input gradient is computed */
			if (dx)
				BE_CALL(be->ops->conv_bwd_data(be, op, dy, P(m, n->w), dx, bx));
			break;
		case NN_BN: {
			/* dx always overwrites (BN's input has one reader); parameter gradients
			 * accumulate through a scratch buffer when asked to. */
			int c = m->acts[in0].c;
			float *dg = G(m, n->w), *db = G(m, n->b);
			if (beta != 0.0f) {
				if (!scratch)
					scratch = be->ops->alloc(be, 2 * 4096 * sizeof(float));
				if (!scratch || c > 4096) {
					errprintf(err, "%s backward: out of memory", n->name);
					goto out;
				}
				dg = scratch;
				db = scratch + 4096;
			}
			float *dz = NULL, bz = 0.0f;
			if (n->in[1] >= 0) { /* fused residual: z's gradient (never the input) */
				int rz = nn_act_root(m, n->in[1]);
				dz = grad_of(m, n->in[1]);
				bz = m->acts[rz].grad_written ? 1.0f : 0.0f;
				m->acts[rz].grad_written = 1;
			}
			BE_CALL(be->ops->bn_bwd(be, op, x, y, dy, P(m, n->w), n->save_mean,
						n->save_invstd, dx ? dx : NULL, dz, bz, dg, db,
						0.0f));
			if (beta != 0.0f) {
				BE_CALL(be->ops->axpby(be, 1.0f, dg, 1.0f, G(m, n->w), (size_t)c));
				BE_CALL(be->ops->axpby(be, 1.0f, db, 1.0f, G(m, n->b), (size_t)c));
			}
			break;
		}
		case NN_RELU:
			if (dx)
				BE_CALL(
				    be->ops->relu_bwd(be, y, dy, dx, numel, dx == dy ? 0.0f : bx));
			break;
		case NN_MAXPOOL:
		case NN_AVGPOOL:
			if (dx)
				BE_CALL(be->ops->pool_bwd(be, op, x, y, dy, dx, bx));
			break;
		case NN_GAP: {
			const struct nn_act *a = &m->acts[in0];
			if (dx)
				BE_CALL(be->ops->gap_bwd(be, dy, dx, batch, a->c, a->h * a->w, bx));
			break;
		}
		case NN_FLATTEN:
			break;
		case NN_LINEAR:
			BE_CALL(be->ops->linear_bwd_weights(be, op, x, dy, G(m, n->w), G(m, n->b),
							    beta));
			grads_final(m, n);
			if (dx)
				BE_CALL(be->ops->linear_bwd_data(be, op, dy, P(m, n->w), dx, bx));
			break;
		case NN_ADD:
			for (int j = 0; j < 2; j++) {
				int rj = nn_act_root(m, n->in[j]);
				if (rj == 0)
					continue;
				float *g = grad_of(m, n->in[j]);
				float b2 = m->acts[rj].grad_written ? 1.0f : 0.0f;
				if (be->ops->act_accum)
					BE_CALL(be->ops->act_accum(be, dy, g, numel, b2));
				else
					BE_CALL(be->ops->axpby(be, 1.0f, dy, b2, g, numel));
				m->acts[rj].grad_written = 1;
			}
			break;
		}
		if (r0 != 0)
			m->acts[r0].grad_written = 1;
		if (n->kind == NN_BN)
			grads_final(m, n);
	}
	rv = 0;
out:
	if (scratch)
		be->ops->free(be, scratch);
	return rv;
}

void nn_set_training(struct nn_model *m, int training)
{
	m->training = training;
}

void nn_set_grad_hook(struct nn_model *m, nn_grad_hook hook, void *ctx)
{
	m->hook = hook;
	m->hook_ctx = ctx;
}

size_t nn_param_count(const struct nn_model *m)
{
	size_t n = 0;
	for (int i = 0; i < m->nparams; i++)
		n += m->params[i].count;
	return n;
}

const struct nn_param *nn_find_param(const struct nn_model *m, const char *name)
{
	for (int i = 0; i < m->nparams; i++)
		if (strcmp(m->params[i].name, name) == 0)
			return &m->params[i];
	return NULL;
}

static const char *kind_name(enum nn_kind k)
{
	static const char *names[] = {"conv2d",	   "batchnorm2d", "relu",
				      "maxpool2d", "avgpool2d",	  "global_avgpool",
				      "flatten",   "linear",	  "add"};
	return names[k];
}

void nn_print_summary(const struct nn_model *m, void *file)
{
	FILE *f = file;
	fprintf(f, "model %s: input %dx%dx%d, %d classes, %zu parameters\n", m->name, m->in_c,
		m->in_h, m->in_w, m->classes, nn_param_count(m));
	for (int i = 0; i < m->nnodes; i++) {
		const struct nn_node *n = &m->nodes[i];
		const struct nn_act *o = &m->acts[n->out];
		size_t np = 0;
		if (n->w >= 0)
			np += m->params[n->w].count;
		if (n->b >= 0)
			np += m->params[n->b].count;
		fprintf(f, "  %-24s %-14s -> %4d x %3d x %3d  %10zu%s\n", n->name,
			kind_name(n->kind), o->c, o->h, o->w, np,
			n->in[1] >= 0 && n->kind == NN_BN ? "  +add+relu"
			: n->relu			  ? "  +relu"
							  : "");
	}
}
