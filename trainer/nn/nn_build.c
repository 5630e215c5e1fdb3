/* nn_build.c — the graph-building vocabulary of nn_build.h: activations, nodes, parameters
 * and buffers appended to a model as models.c spells out a network. Knows nothing of memory
 * planning or schedules (nn.c), nor of particular models (models.c): both use it. */
#include "trainer/nn/nn_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *grow(void *p, int n, int *cap, size_t elem)
{
	if (n < *cap)
		return p;
	int ncap = *cap ? *cap * 2 : 32;
	void *q = realloc(p, (size_t)ncap * elem);
	if (!q)
		return NULL;
	memset((char *)q + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
	*cap = ncap;
	return q;
}

static int add_act(struct builder *b, int c, int h, int w)
{
	struct nn_model *m = b->m;
	struct nn_act *a = grow(m->acts, m->nacts, &b->cap_acts, sizeof(*a));
	if (!a) {
		b->oom = 1;
		return 0;
	}
	m->acts = a;
	a[m->nacts] = (struct nn_act){.c = c, .h = h, .w = w, .alias = -1, .gslot = -1};
	return m->nacts++;
}

static struct nn_node *add_node(struct builder *b, enum nn_kind kind, const char *name, int in0,
				int in1)
{
	struct nn_model *m = b->m;
	struct nn_node *n = grow(m->nodes, m->nnodes, &b->cap_nodes, sizeof(*n));
	if (!n) {
		b->oom = 1;
		return NULL;
	}
	m->nodes = n;
	n += m->nnodes++;
	*n = (struct nn_node){
	    .kind = kind, .in = {in0, in1}, .out = -1, .w = -1, .b = -1, .rmean = -1, .rvar = -1};
	snprintf(n->name, sizeof(n->name), "%s", name ? name : "");
	return n;
}

static int add_param(struct builder *b, const char *module, const char *what, int ndim,
		     const int *shape, int bn_or_bias)
{
	struct nn_model *m = b->m;
	struct nn_param *p = grow(m->params, m->nparams, &b->cap_params, sizeof(*p));
	if (!p) {
		b->oom = 1;
		return -1;
	}
	m->params = p;
	p += m->nparams;
	snprintf(p->name, sizeof(p->name), "%s.%s", module, what);
	p->ndim = ndim;
	p->count = 1;
	for (int i = 0; i < ndim; i++) {
		p->shape[i] = shape[i];
		p->count *= (size_t)shape[i];
	}
	p->is_bn_or_bias = bn_or_bias;
	p->node = m->nnodes - 1;
	return m->nparams++;
}

static int add_buffer(struct builder *b, const char *module, const char *what, int c)
{
	struct nn_model *m = b->m;
	struct nn_buffer *q = grow(m->bufs, m->nbufs, &b->cap_bufs, sizeof(*q));
	if (!q) {
		b->oom = 1;
		return -1;
	}
	m->bufs = q;
	q += m->nbufs;
	snprintf(q->name, sizeof(q->name), "%s.%s", module, what);
	q->c = c;
	q->count = (size_t)c;
	q->offset = m->state_total;
	m->state_total += (size_t)c;
	return m->nbufs++;
}

int nn_b_conv(struct builder *b, const char *name, int in, int k, int ksize, int stride, int pad,
	      int bias)
{
	struct nn_model *m = b->m;
	if (b->oom)
		return 0;
	int c = m->acts[in].c, h = m->acts[in].h, w = m->acts[in].w;
	int oh = (h + 2 * pad - ksize) / stride + 1, ow = (w + 2 * pad - ksize) / stride + 1;
	struct nn_node *n = add_node(b, NN_CONV, name, in, -1);
	if (!n)
		return 0;
	n->k = k;
	n->kh = n->kw = ksize;
	n->stride = stride;
	n->pad = pad;
	n->bias = bias;
	int wshape[4] = {k, c, ksize, ksize};
	n->w = add_param(b, name, "weight", 4, wshape, 0);
	if (bias)
		n->b = add_param(b, name, "bias", 1, &k, 1);
	int out = add_act(b, k, oh, ow);
	m->nodes[m->nnodes - 1].out = out;
	return out;
}

int nn_b_bn(struct builder *b, const char *name, int in, int relu)
{
	struct nn_model *m = b->m;
	if (b->oom)
		return 0;
	int c = m->acts[in].c;
	struct nn_node *n = add_node(b, NN_BN, name, in, -1);
	if (!n)
		return 0;
	n->eps = 1e-5f;
	n->momentum = 0.1f;
	n->relu = relu;
	n->w = add_param(b, name, "weight", 1, &c, 1);
	n->b = add_param(b, name, "bias", 1, &c, 1);
	n = &m->nodes[m->nnodes - 1];
	n->rmean = add_buffer(b, name, "running_mean", c);
	n->rvar = add_buffer(b, name, "running_var", c);
	int out = add_act(b, c, m->acts[in].h, m->acts[in].w);
	m->nodes[m->nnodes - 1].out = out;
	return out;
}

/* ReLU runs in place when its input has no other reader and the producer's backward does
 * not need its own output (ReLU, BN+ReLU and pooling do). */
int nn_b_relu(struct builder *b, int in)
{
	struct nn_model *m = b->m;
	if (b->oom)
		return 0;
	if (!add_node(b, NN_RELU, "relu", in, -1))
		return 0;
	int out = add_act(b, m->acts[in].c, m->acts[in].h, m->acts[in].w);
	m->nodes[m->nnodes - 1].out = out;
	return out;
}

int nn_b_pool(struct builder *b, enum nn_kind kind, int in, int ksize, int stride, int pad)
{
	struct nn_model *m = b->m;
	if (b->oom)
		return 0;
	int c = m->acts[in].c, h = m->acts[in].h, w = m->acts[in].w;
	struct nn_node *n = add_node(b, kind, kind == NN_MAXPOOL ? "maxpool" : "avgpool", in, -1);
	if (!n)
		return 0;
	n->kh = n->kw = ksize;
	n->stride = stride;
	n->pad = pad;
	int out =
	    add_act(b, c, (h + 2 * pad - ksize) / stride + 1, (w + 2 * pad - ksize) / stride + 1);
	m->nodes[m->nnodes - 1].out = out;
	return out;
}

int nn_b_gap(struct builder *b, int in)
{
	struct nn_model *m = b->m;
	if (b->oom)
		return 0;
	if (!add_node(b, NN_GAP, "avgpool", in, -1))
		return 0;
	int out = add_act(b, m->acts[in].c, 1, 1);
	m->nodes[m->nnodes - 1].out = out;
	return out;
}

int nn_b_flatten(struct builder *b, int in)
{
	struct nn_model *m = b->m;
	if (b->oom)
		return 0;
	if (!add_node(b, NN_FLATTEN, "flatten", in, -1))
		return 0;
	const struct nn_act *a = &m->acts[in];
	int out = add_act(b, a->c * a->h * a->w, 1, 1);
	m->acts[out].alias = in;
	m->nodes[m->nnodes - 1].out = out;
	return out;
}

int nn_b_linear(struct builder *b, const char *name, int in, int out_features, int bias)
{
	struct nn_model *m = b->m;
	if (b->oom)
		return 0;
	const struct nn_act *a = &m->acts[in];
	int in_features = a->c * a->h * a->w;
	struct nn_node *n = add_node(b, NN_LINEAR, name, in, -1);
	if (!n)
		return 0;
	n->k = out_features;
	n->bias = bias;
	int wshape[2] = {out_features, in_features};
	n->w = add_param(b, name, "weight", 2, wshape, 0);
	if (bias)
		n->b = add_param(b, name, "bias", 1, &out_features, 1);
	int out = add_act(b, out_features, 1, 1);
	m->nodes[m->nnodes - 1].out = out;
	return out;
}

int nn_b_add(struct builder *b, int x, int y)
{
	struct nn_model *m = b->m;
	if (b->oom)
		return 0;
	if (!add_node(b, NN_ADD, "add", x, y))
		return 0;
	int out = add_act(b, m->acts[x].c, m->acts[x].h, m->acts[x].w);
	m->nodes[m->nnodes - 1].out = out;
	return out;
}

int nn_b_input(struct builder *b, int c, int h, int w)
{
	return add_act(b, c, h, w);
}
