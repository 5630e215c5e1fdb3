/* nn_build.h — the graph-building vocabulary (nn_build.c) that models.c spells out mlp, lenet
 * and the resnets with, and nn.c starts a model with. Internal to the trainer. */
#ifndef DPTRAIN_NN_BUILD_H
#define DPTRAIN_NN_BUILD_H

#include "common/error.h"
#include "trainer/nn/nn.h"

struct builder {
	struct nn_model *m;
	int cap_nodes, cap_acts, cap_params, cap_bufs;
	int oom;
};

/* An activation of c x h x w with no producer: the model's input (id 0 when first). */
int nn_b_input(struct builder *b, int c, int h, int w);

/* The activation that holds a's data (a view's, e.g. flatten's, is its source's). */
static inline int nn_act_root(const struct nn_model *m, int a)
{
	while (m->acts[a].alias >= 0)
		a = m->acts[a].alias;
	return a;
}

/* Each returns the id of the output activation (0 after an allocation failure, which sets
 * b->oom). Names are PyTorch module names so parameters get state_dict names. */
int nn_b_conv(struct builder *b, const char *name, int in, int k, int ksize, int stride, int pad,
	      int bias);
int nn_b_bn(struct builder *b, const char *name, int in, int relu);
int nn_b_relu(struct builder *b, int in);
int nn_b_pool(struct builder *b, enum nn_kind kind, int in, int ksize, int stride, int pad);
int nn_b_gap(struct builder *b, int in);
int nn_b_flatten(struct builder *b, int in);
int nn_b_linear(struct builder *b, const char *name, int in, int out_features, int bias);
int nn_b_add(struct builder *b, int x, int y);

/* models.c: builds the named model on input activation 0. */
int nn_models_build(struct builder *b, const struct nn_spec *spec, struct dp_error *err);

#endif
