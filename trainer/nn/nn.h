/* nn.h — models as a list of nodes over activation slots, parameters in one flat buffer.
 * Owns the forward/backward schedule, activation and gradient memory, parameter layout and
 * the per-node "gradients are final" hook DDP uses. Computes nothing itself: every number
 * comes from the backend's ops. Must not know about data, optimizers or communication. */
#ifndef DPTRAIN_NN_H
#define DPTRAIN_NN_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "trainer/backend/backend.h"

#define NN_NAME_MAX   80
#define NN_GRAD_SPARE 16 /* floats past param_total in model->grads (see there) */
#define NN_OPS_CACHED 4	 /* ops kept per node: one per batch size seen (train, last, eval) */

enum nn_kind {
	NN_CONV,
	NN_BN, /* batchnorm2d; relu fused when node.relu; with in[1] >= 0, the residual
		* add fused too: out = relu(bn(in[0]) + in[1]) (nn_build does that) */
	NN_RELU,
	NN_MAXPOOL,
	NN_AVGPOOL,
	NN_GAP,	    /* global average pool: NCHW -> NC */
	NN_FLATTEN, /* a view: shares memory with its input */
	NN_LINEAR,
	NN_ADD, /* residual add of two activations */
};

/* A trainable tensor: a view into model->params / model->grads. */
struct nn_param {
	char name[NN_NAME_MAX]; /* the PyTorch state_dict name, e.g. "layer1.0.conv1.weight" */
	size_t offset, count;
	int ndim, shape[4];
	int is_bn_or_bias; /* for optimizer.no_decay_bn_bias */
	int node;	   /* owning node */
};

/* A non-trainable tensor (BN running statistics): a view into model->state. */
struct nn_buffer {
	char name[NN_NAME_MAX];
	size_t offset, count;
	int c;
};

struct nn_node {
	enum nn_kind kind;
	char name[NN_NAME_MAX]; /* module name: "layer1.0.conv1" */
	int in[2];		/* activation ids; in[1] = -1 except for NN_ADD and fused BN */
	int out;
	/* hyperparameters */
	int k, kh, kw, stride, pad, bias, relu;
	float eps, momentum;
	/* parameters and state (indices into model arrays, -1 if none) */
	int w, b;	 /* conv/linear weight and bias; bn gamma (w) and beta (b) */
	int rmean, rvar; /* bn running stats (buffers) */
	float *save_mean, *save_invstd;
	/* planned ops, per batch size */
	struct be_op *op[NN_OPS_CACHED];
	int op_n[NN_OPS_CACHED];
};

struct nn_act {
	int c, h, w;	  /* per sample */
	int alias;	  /* NN_FLATTEN output: the activation whose memory it shares, else -1 */
	int unused;	  /* produced and read by no node (left behind by fusion) */
	int consumers;	  /* nodes reading it */
	float *data;	  /* batch capacity x c*h*w */
	int gslot;	  /* gradient memory slot (shared between activations whose lifetimes
			     do not overlap in backward), -1 if it needs none */
	int grad_written; /* during backward: 0 until the first consumer writes its gradient */
};

/* What to build: mlp (hidden widths; hidden NULL: 512-512; an empty list: a linear
 * classifier), lenet, resnet18/34/50/101/152 (stem
 * "imagenet", "small", or NULL for small when h <= 64) for c x h x w inputs. */
struct nn_spec {
	const char *name;
	int c, h, w, classes;
	const char *stem;
	const int *hidden;
	int nhidden;
	int unfused; /* keep BN, residual add and ReLU as separate nodes (tests compare both) */
};

typedef void (*nn_grad_hook)(void *ctx, size_t offset, size_t count);

struct nn_model {
	struct backend *be;
	char name[32];
	int in_c, in_h, in_w, classes;
	struct nn_spec spec; /* as built (pointers not kept) */
	int nnodes, nacts, nparams, nbufs;
	struct nn_node *nodes;
	struct nn_act *acts; /* acts[0] is the input */
	struct nn_param *params;
	struct nn_buffer *bufs;
	size_t param_total, state_total;
	float *weights;		 /* flat, backend memory; reverse execution order */
	float *grads;		 /* same layout, then NN_GRAD_SPARE floats the model never
				  * touches: DDP carries its control values there */
	float *state;		 /* BN running mean/var */
	int64_t batches_tracked; /* BN num_batches_tracked (same for every BN layer) */
	int capacity;		 /* batch size activations are allocated for */
	void *input;		 /* the batch in the backend's activation type, where that is not
				  * float32 (act_import); else act 0 points at the caller's batch */
	int ngslots;
	float **gslots;
	size_t *gslot_size; /* floats per sample */
	float *dlogits;
	nn_grad_hook hook;
	void *hook_ctx;
	int training;
};

/* Parameters are allocated (zero) but not initialised: nn_init_weights or nn_load_weights. */
int nn_build(struct nn_model *m, struct backend *be, const struct nn_spec *spec,
	     struct dp_error *err);
void nn_free(struct nn_model *m);

/* PyTorch's default initialisation (torchvision's for resnets) from a seeded generator. */
int nn_init_weights(struct nn_model *m, uint64_t seed, struct dp_error *err);

/* Allocate activations and gradient slots for up to `batch` samples (grows as needed). */
int nn_reserve(struct nn_model *m, int batch, struct dp_error *err);

/* Forward of a batch x (float32 in backend memory, n x c x h x w). Returns logits (n x classes,
 * an activation: float32 only where be->act_dtype is BE_F32; act_export converts). */
int nn_forward(struct nn_model *m, const float *x, int n, float **logits, struct dp_error *err);
/* Loss and accuracy of the last forward; with training set, also the logits gradient.
 * scale multiplies the gradient (1/accumulation steps, loss scale). */
int nn_loss(struct nn_model *m, const int32_t *labels, int n, float smoothing, float scale,
	    float *loss, int *correct, struct dp_error *err);
/* Backward of the last forward. beta 0: gradients overwrite model->grads; 1: accumulate.
 * Calls the hook after each node's parameter gradients are final. */
int nn_backward(struct nn_model *m, int n, float beta, struct dp_error *err);

void nn_set_training(struct nn_model *m, int training);
void nn_set_grad_hook(struct nn_model *m, nn_grad_hook hook, void *ctx);

size_t nn_param_count(const struct nn_model *m);
const struct nn_param *nn_find_param(const struct nn_model *m, const char *name);

/* Weights (parameters and BN running statistics, num_batches_tracked as I64) as safetensors
 * with PyTorch state_dict names, in state_dict order; loadable by torch's load_state_dict.
 * Loading is strict: every tensor present with the same shape, nothing extra (F32, F16, BF16
 * and F64 are converted). metadata_json: a JSON object of strings, or NULL. */
int nn_save_weights(const struct nn_model *m, const char *path, const char *metadata_json,
		    struct dp_error *err);
int nn_load_weights(struct nn_model *m, const char *path, struct dp_error *err);

/* Human-readable summary: one line per node, shapes and parameter counts. */
void nn_print_summary(const struct nn_model *m, void *file);

#endif
