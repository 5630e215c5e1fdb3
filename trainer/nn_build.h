/* nn_build.h — the graph-building vocabulary shared by nn.c (which owns the graph) and
 * models.c (which spells out mlp, lenet and the resnets with it). Internal to the trainer. */
#ifndef DPTRAIN_NN_BUILD_H
#define DPTRAIN_NN_BUILD_H

#include "nn.h"

struct builder {
	struct nn_model *m;
	int cap_nodes, cap_acts, cap_params, cap_bufs;
	int oom;
};

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
int nn_models_build(struct builder *b, const struct nn_spec *spec, char *err, size_t errlen);

#endif
