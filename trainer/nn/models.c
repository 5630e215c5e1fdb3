/* models.c — the bundled networks, spelled with nn_build.h: mlp (MindSpore's data-parallel
 * tutorial net), lenet (the PyTorch tutorial CNN) and torchvision's resnet18..152 (v1.5:
 * stride on the 3x3 conv of a bottleneck). Module names follow PyTorch so parameters carry
 * state_dict names and safetensors files interchange with torch. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "config/config.h"
#include "trainer/nn/nn_build.h"

static int mlp(struct builder *b, const int *hidden, int nhidden, struct dp_error *err)
{
	static const int tutorial[2] = {512, 512};
	if (!hidden) { /* not given; an empty list is a linear classifier */
		hidden = tutorial;
		nhidden = 2;
	}
	if (nhidden > 16) {
		errprintf(err, "model mlp: at most 16 hidden layers (got %d)", nhidden);
		return -1;
	}
	int x = nn_b_flatten(b, 0);
	char name[16];
	for (int i = 0; i < nhidden; i++) {
		if (hidden[i] < 1) {
			errprintf(err, "model mlp: hidden layer %d has width %d", i, hidden[i]);
			return -1;
		}
		snprintf(name, sizeof(name), "fc%d", i + 1);
		x = nn_b_relu(b, nn_b_linear(b, name, x, hidden[i], 1));
	}
	snprintf(name, sizeof(name), "fc%d", nhidden + 1);
	nn_b_linear(b, name, x, b->m->classes, 1);
	return 0;
}

/* conv 6@5x5 - pool - conv 16@5x5 - pool - fc 120 - 84 - classes. Inputs smaller than the
 * tutorial's 32x32 get padding on the first conv so the rest of the net sees 28x28. */
static int lenet(struct builder *b, struct dp_error *err)
{
	int h = b->m->in_h, w = b->m->in_w;
	if (h != w || h < 28 || h > 32) {
		errprintf(err, "model lenet: input must be square, 28 to 32 pixels (got %dx%d)", h,
			  w);
		return -1;
	}
	int pad = (32 - h) / 2;
	int x = nn_b_relu(b, nn_b_conv(b, "conv1", 0, 6, 5, 1, pad, 1));
	x = nn_b_pool(b, NN_MAXPOOL, x, 2, 2, 0);
	x = nn_b_relu(b, nn_b_conv(b, "conv2", x, 16, 5, 1, 0, 1));
	x = nn_b_pool(b, NN_MAXPOOL, x, 2, 2, 0);
	x = nn_b_flatten(b, x);
	x = nn_b_relu(b, nn_b_linear(b, "fc1", x, 120, 1));
	x = nn_b_relu(b, nn_b_linear(b, "fc2", x, 84, 1));
	nn_b_linear(b, "fc3", x, b->m->classes, 1);
	return 0;
}

static int basic_block(struct builder *b, const char *name, int x, int planes, int stride)
{
	char n1[NN_NAME_MAX], n2[NN_NAME_MAX];
	int in_c = b->m->acts[x].c;
	snprintf(n1, sizeof(n1), "%s.conv1", name);
	snprintf(n2, sizeof(n2), "%s.bn1", name);
	int y = nn_b_bn(b, n2, nn_b_conv(b, n1, x, planes, 3, stride, 1, 0), 1);
	snprintf(n1, sizeof(n1), "%s.conv2", name);
	snprintf(n2, sizeof(n2), "%s.bn2", name);
	y = nn_b_bn(b, n2, nn_b_conv(b, n1, y, planes, 3, 1, 1, 0), 0);
	int id = x;
	if (stride != 1 || in_c != planes) {
		snprintf(n1, sizeof(n1), "%s.downsample.0", name);
		snprintf(n2, sizeof(n2), "%s.downsample.1", name);
		id = nn_b_bn(b, n2, nn_b_conv(b, n1, x, planes, 1, stride, 0, 0), 0);
	}
	return nn_b_relu(b, nn_b_add(b, y, id));
}

static int bottleneck(struct builder *b, const char *name, int x, int planes, int stride)
{
	char n1[NN_NAME_MAX], n2[NN_NAME_MAX];
	int in_c = b->m->acts[x].c, out_c = planes * 4;
	snprintf(n1, sizeof(n1), "%s.conv1", name);
	snprintf(n2, sizeof(n2), "%s.bn1", name);
	int y = nn_b_bn(b, n2, nn_b_conv(b, n1, x, planes, 1, 1, 0, 0), 1);
	snprintf(n1, sizeof(n1), "%s.conv2", name);
	snprintf(n2, sizeof(n2), "%s.bn2", name);
	y = nn_b_bn(b, n2, nn_b_conv(b, n1, y, planes, 3, stride, 1, 0), 1);
	snprintf(n1, sizeof(n1), "%s.conv3", name);
	snprintf(n2, sizeof(n2), "%s.bn3", name);
	y = nn_b_bn(b, n2, nn_b_conv(b, n1, y, out_c, 1, 1, 0, 0), 0);
	int id = x;
	if (stride != 1 || in_c != out_c) {
		snprintf(n1, sizeof(n1), "%s.downsample.0", name);
		snprintf(n2, sizeof(n2), "%s.downsample.1", name);
		id = nn_b_bn(b, n2, nn_b_conv(b, n1, x, out_c, 1, stride, 0, 0), 0);
	}
	return nn_b_relu(b, nn_b_add(b, y, id));
}

static int resnet(struct builder *b, int depth, const char *stem, struct dp_error *err)
{
	static const struct {
		int depth, bottleneck, blocks[4];
	} table[] = {
	    {18, 0, {2, 2, 2, 2}},   {34, 0, {3, 4, 6, 3}},   {50, 1, {3, 4, 6, 3}},
	    {101, 1, {3, 4, 23, 3}}, {152, 1, {3, 8, 36, 3}},
	};
	int t = -1;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (table[i].depth == depth)
			t = (int)i;
	if (t < 0) {
		errprintf(err, "model resnet%d: no such depth (18, 34, 50, 101, 152)", depth);
		return -1;
	}
	int small;
	if (!stem || !*stem)
		small = b->m->in_h <= 64;
	else if (strcmp(stem, "small") == 0)
		small = 1;
	else if (strcmp(stem, "imagenet") == 0)
		small = 0;
	else {
		errprintf(err, "model resnet%d: unknown stem \"%s\" (imagenet or small)", depth,
			  stem);
		return -1;
	}
	int x;
	if (small) {
		x = nn_b_bn(b, "bn1", nn_b_conv(b, "conv1", 0, 64, 3, 1, 1, 0), 1);
	} else {
		x = nn_b_bn(b, "bn1", nn_b_conv(b, "conv1", 0, 64, 7, 2, 3, 0), 1);
		x = nn_b_pool(b, NN_MAXPOOL, x, 3, 2, 1);
	}
	for (int layer = 0; layer < 4; layer++) {
		int planes = 64 << layer;
		for (int i = 0; i < table[t].blocks[layer]; i++) {
			char name[32]; /* "layerL.B" */
			snprintf(name, sizeof(name), "layer%d.%d", layer + 1, i);
			int stride = (i == 0 && layer > 0) ? 2 : 1;
			if (b->oom)
				return 0;
			x = table[t].bottleneck ? bottleneck(b, name, x, planes, stride)
						: basic_block(b, name, x, planes, stride);
		}
	}
	if (b->m->acts[x].h < 1) {
		errprintf(err, "model resnet%d: input %dx%d is too small", depth, b->m->in_h,
			  b->m->in_w);
		return -1;
	}
	x = nn_b_gap(b, x);
	x = nn_b_flatten(b, x);
	nn_b_linear(b, "fc", x, b->m->classes, 1);
	return 0;
}

/* The one list is the config's (config_models.def): find the name there, build its family. */
int nn_models_build(struct builder *b, const struct nn_spec *spec, struct dp_error *err)
{
	char names[256] = "";
	const char *name;
	int m;

	for (m = 0; (name = cfg_model_string((enum cfg_model_name)m)); m++) {
		if (strcmp(spec->name, name) != 0)
			continue;
		switch (cfg_model_family((enum cfg_model_name)m)) {
		case CFG_FAMILY_MLP:
			return mlp(b, spec->hidden, spec->nhidden, err);
		case CFG_FAMILY_LENET:
			return lenet(b, err);
		case CFG_FAMILY_RESNET:
			return resnet(b, cfg_model_arg((enum cfg_model_name)m), spec->stem, err);
		}
	}
	for (m = 0; (name = cfg_model_string((enum cfg_model_name)m)); m++)
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
			 m ? ", " : "", name);
	errprintf(err, "unknown model \"%s\" (%s)", spec->name, names);
	return -1;
}
